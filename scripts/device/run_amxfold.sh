#!/usr/bin/env bash
# Device run "amxfold" (issue 12, session 8, branch amxfold): the AMX-INT8 kernels' folds.
# Staged by scripts/device/stage_amxfold.sh; run as `bash .devcarry/amxfold/run_amxfold.sh`
# (log under $OUT). In order, within BUDGET seconds (default 235):
#  1. test_quant_amx_emulated and test_quant_kernels (amx on the real tiles), while the
#     models are made (cairn synth --preset qwen3-0.6b, hf2gguf.py --type bf16, llama-quantize
#     Q8_0 / Q4_K_M on cores 8-15);
#  2. bench_amx_parts, one thread on core 2, nothing else running: this branch (new), main's
#     quant_amx.c (main), AMX_KQ_SCHED=2 (kq2), AMX_B32_AHEAD=0 / 1 (ahead0 / ahead1), in the
#     order new main kq2 ahead0 ahead1 main new; each line ends with the real tiles' bits
#     against the VNNI kernel's;
#  3. pp512 at 2 threads on cores 0,1, interleaved C M L L M C per type (C this branch's
#     bench_engine, M main's, L llama.cpp's AVX-512 build), twice while the budget lasts.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-235}
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
grep -o 'amx_[a-z0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
B=$D/bin; M=/tmp/amxm; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
models() {
  taskset -c 8-15 "$B/cairn" synth $M/hf --preset qwen3-0.6b >/dev/null &&
  taskset -c 8-15 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null &&
  taskset -c 8-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 8 >/dev/null &&
  taskset -c 8-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 8 >/dev/null
  echo "models rc $?"
}
el "models (cores 8-15, in the background)"
models > "$O/models.log" 2>&1 &
MP=$!
step test_quant_amx_emulated 40 taskset -c 3 "$B/test_quant_amx_emulated"
step test_quant_kernels 40 taskset -c 4-7 "$B/test_quant_kernels"
el "waiting for the models"; wait $MP; cat "$O/models.log"; ls -la $M
rm -rf $M/hf $M/q06-bf16.gguf
for v in new main kq2 ahead0 ahead1 main new; do
  step "bench_amx_parts $v (core 2)" 20 taskset -c 2 "$B/parts.$v" 7
done
for round in 1 2; do
  for t in Q8_0 Q4_K_M; do
    f=$M/q06-$t.gguf
    for who in C M L L M C; do
      [ "$(left)" -le 15 ] && { el "SKIPPED (budget): pp512 $t $who"; continue; }
      case $who in
        C) step "pp512 $t cairn branch" 25 taskset -c 0,1 "$B/bench_engine" --gguf $f --threads 2 --runs 1 --long 0 --only pp ;;
        M) step "pp512 $t cairn main" 25 taskset -c 0,1 "$B/bench_engine.main" --gguf $f --threads 2 --runs 1 --long 0 --only pp ;;
        L) step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $f -t 2 -p 512 -n 0 -r 1 ;;
      esac
    done
  done
done
el done
