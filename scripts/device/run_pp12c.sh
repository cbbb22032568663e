#!/usr/bin/env bash
# Device run "pp12c" (issue 12, session 12, lead): the 8K-token prompt, Q4_K_M at 2 threads,
# main (bin/bench_engine, --long 8192 in 512-token steps) and llama.cpp (pp8192 without its
# warm-up run, which made run_pp12b's call time out), N L N, on the folder run_pp12.sh staged.
# `BUDGET=S bash .devcarry/pp12/run_pp12c.sh`.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-150}
T0=$(date +%s)
. "$D/common.sh" # el, left, step, models_q06
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
unset CAIRN_ATTN_BF16TILE CAIRN_ATTN_BF16PAIR
exec > >(tee "$O/log") 2>&1
el "cpu (BUDGET=$BUDGET)"
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; nproc
B=$D/bin; M=/tmp/m9
[ -f $M/q06-Q4_K_M.gguf ] || models_q06 $M
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
[ -x $P/llama-bench ] || tar -C /tmp -xJf "$D"/llama.cpp-*.tar.xz
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
G=$M/q06-Q4_K_M.gguf
step "pp8192 Q4_K_M new" 90 taskset -c 0,1 $B/bench_engine --threads 2 --runs 1 --only pp --long 8192 --gguf $G
step "pp8192 Q4_K_M llama.cpp" 240 taskset -c 0,1 $P/llama-bench -m $G -t 2 -p 8192 -n 0 -r 1 --no-warmup
step "pp8192 Q4_K_M new" 90 taskset -c 0,1 $B/bench_engine --threads 2 --runs 1 --only pp --long 8192 --gguf $G
el done
