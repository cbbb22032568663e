#!/usr/bin/env bash
# Device run "prof9" (issue 12, session 9): where the time of the two unmet prefill targets
# goes on the device machine's Intel Xeon, under main's defaults (tile order on, AMX-INT8).
# Staged by scripts/device/stage_prof9.sh; run as `BUDGET=S bash .devcarry/prof9/run_prof9.sh`
# (log and samples under $OUT; symbolize here with scripts/device/xeon_symbolize.py).
#  1. bench_attention --ctx 8192 (a 512-query chunk at the end of 8K, tile order, one
#     thread) under the sampling profiler on core 2, and the same unprofiled under
#     CAIRN_ATTN_TILE_ROWS=128 on core 3, while the models are made (cores 4-15);
#  2. pp512 Q4_K_M and Q8_0 at 2 threads on cores 0,1: llama.cpp, Cairn, Cairn under the
#     profiler, Cairn with CAIRN_OP_TIMES=1, llama.cpp; bench_amx_parts on core 2.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-200}
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
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
exec > >(tee "$O/log") 2>&1
el "cpu (BUDGET=$BUDGET)"
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; grep -m1 'cpu MHz' /proc/cpuinfo; nproc
grep -o -w -E 'amx_[a-z0-9]+|avx512_bf16|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
command -v perf && perf --version
B=$D/bin
SAMP="env LD_PRELOAD=$D/lib/libxeon_sampler.so XEON_SAMPLER_US=250"
( taskset -c 2 timeout 60 $SAMP XEON_SAMPLER_OUT=$O/prof_attn.txt "$B/bench_attention" --ctx 8192 --reps 3 --numerics tile
  echo "rc $?"; taskset -c 2 timeout 40 "$B/bench_amx_parts" 5; echo "rc $?" ) >/tmp/attn.log 2>&1 &
AP=$!
( taskset -c 3 timeout 60 env CAIRN_ATTN_TILE_ROWS=128 "$B/bench_attention" --ctx 8192 --reps 3 --numerics tile,f32; echo "rc $?" ) >/tmp/attn128.log 2>&1 &
AP2=$!
M=/tmp/m9; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
step synth 30 taskset -c 4-15 "$B/cairn" synth $M/hf --preset qwen3-0.6b >/dev/null
step hf2gguf 40 taskset -c 4-15 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null
step quantize-q8_0 30 taskset -c 4-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 12 >/dev/null 2>&1
step quantize-q4_k_m 30 taskset -c 4-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 12 >/dev/null 2>&1
rm -rf $M/hf $M/q06-bf16.gguf; ls -la $M
BE="$B/bench_engine --threads 2 --runs 1 --only pp --long 0"
for t in Q4_K_M Q8_0; do
  step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 512 -n 0 -r 1
  step "pp512 $t cairn" 25 taskset -c 0,1 $BE --gguf $M/q06-$t.gguf
  step "pp512 $t cairn (sampler)" 25 taskset -c 0,1 $SAMP XEON_SAMPLER_OUT=$O/prof_pp_$t.txt $BE --gguf $M/q06-$t.gguf
  step "pp512 $t cairn (op times)" 25 taskset -c 0,1 env CAIRN_OP_TIMES=1 $BE --gguf $M/q06-$t.gguf
  step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 512 -n 0 -r 1
done
wait $AP $AP2
echo "=== bench_attention (sampler) + bench_amx_parts, core 2"; cat /tmp/attn.log
echo "=== bench_attention rows 128, core 3"; cat /tmp/attn128.log
el done
