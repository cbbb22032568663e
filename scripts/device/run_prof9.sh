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
. "$D/common.sh" # el, left, step, models_q06
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
M=/tmp/m9
models_q06 $M 4-15
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
