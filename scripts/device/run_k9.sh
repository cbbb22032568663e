#!/usr/bin/env bash
# Device run "k9" (issue 12, session 9, lead): the 8K prompt with less load than run lead9
# (four prompts at once instead of six: the merged main and llama.cpp, Q4_K_M on cores 2-5,
# Q8_0 on 6-9) and, meanwhile on cores 12,13, a sampled profile of the merged main's decode
# (tg128 Q4_K_M) for where a token's time goes. Staged by scripts/device/stage_lead9.sh
# plus the sampler (lib/libxeon_sampler.so); `BUDGET=S bash .devcarry/lead9/run_k9.sh`.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-220}
T0=$(date +%s)
. "$D/common.sh" # el, left, step, models_q06
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}"
unset CAIRN_ATTN_BF16TILE CAIRN_ATTN_BF16PAIR
exec > >(tee "$O/log") 2>&1
el "cpu (BUDGET=$BUDGET)"; grep -m1 '^model\s' /proc/cpuinfo
B=$D/bin
M=/tmp/m9
models_q06 $M
el "models made"
PIDS=()
long8k() { # NAME CORES CMD...
  local name=$1 cores=$2; shift 2
  local l=$(( $(left) - 5 ))
  ( echo "start 8K $name (cores $cores) at $(( $(date +%s) - T0 )) s"; timeout $l taskset -c $cores "$@"
    echo "rc $? at $(( $(date +%s) - T0 )) s" ) >"/tmp/8k-$name.log" 2>&1 &
  PIDS+=($!)
}
long8k llama-Q4_K_M 2,3 $P/llama-bench -m $M/q06-Q4_K_M.gguf -t 2 -p 8192 -n 0 -r 1 --no-warmup
long8k llama-Q8_0 6,7 $P/llama-bench -m $M/q06-Q8_0.gguf -t 2 -p 8192 -n 0 -r 1 --no-warmup
long8k new-Q4_K_M 4,5 $B/bench_engine --threads 2 --runs 1 --only pp --gguf $M/q06-Q4_K_M.gguf --long 8192
long8k new-Q8_0 8,9 $B/bench_engine --threads 2 --runs 1 --only pp --gguf $M/q06-Q8_0.gguf --long 8192
el "decode profile (cores 12,13)"
taskset -c 12,13 env LD_PRELOAD="$D/lib/libxeon_sampler.so" XEON_SAMPLER_OUT="$O/prof_tg_Q4_K_M.txt" XEON_SAMPLER_US=250 \
  XEON_SAMPLER_SKIP_MS=4000 timeout 60 $B/bench_engine --threads 2 --runs 2 --only tg --long 0 --gguf $M/q06-Q4_K_M.gguf
taskset -c 12,13 env CAIRN_OP_TIMES=1 timeout 60 $B/bench_engine --threads 2 --runs 1 --only tg --long 0 --gguf $M/q06-Q4_K_M.gguf
el "waiting for the 8K prompts"
wait "${PIDS[@]}"
for f in /tmp/8k-*.log; do echo "=== $f"; grep -E 'start|pp8192|tok/s|rc ' "$f"; done
el done
