#!/usr/bin/env bash
# Device run "pp512" (issue 12, session 7, lead): pp512 at 2 threads on cores 0,1 of the
# device's Xeon, Cairn's default build (AMX-INT8 kernels, the f32 attention order) against
# llama.cpp's AVX-512 build on the same GGUF files, interleaved C L L C C L per type, with
# nothing else running. Staged like run_amxattn.sh (scripts/device/stage_amxattn.sh, then
# copy this file beside it); run as `bash .devcarry/amx/run_pp512.sh` (log under $OUT).
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-150}
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
step() {
  local name=$1 max=$2; shift 2
  local l; l=$(left)
  if [ "$l" -le 5 ]; then el "SKIPPED (budget): $name"; return; fi
  [ "$max" -gt "$l" ] && max=$l
  el "$name"
  timeout "$max" "$@"; echo "rc $?"
}
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}"
exec > >(tee "$O/log") 2>&1
el cpu; grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; nproc
B=$D/bin; M=/tmp/amxm; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
step synth 30 "$B/cairn" synth $M/hf --preset qwen3-0.6b
step hf2gguf 40 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null
step quantize-q8_0 30 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 16 >/dev/null
step quantize-q4_k_m 30 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 16 >/dev/null
rm -rf $M/hf $M/q06-bf16.gguf
for t in Q8_0 Q4_K_M; do
  f=$M/q06-$t.gguf
  for who in C L L C C L; do
    if [ $who = C ]; then step "pp512 $t cairn" 25 taskset -c 0,1 "$B/bench_engine" --gguf $f --threads 2 --runs 1 --long 0 --only pp
    else step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $f -t 2 -p 512 -n 0 -r 1; fi
  done
done
el done
