#!/usr/bin/env bash
# Device run "pp12c" (issue 12, session 12, lead): the 8K-token prompt, Q4_K_M at 2 threads,
# main (bin/bench_engine, --long 8192 in 512-token steps) and llama.cpp (pp8192 without its
# warm-up run, which made run_pp12b's call time out), N L N, on the folder run_pp12.sh staged.
# `BUDGET=S bash .devcarry/pp12/run_pp12c.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh" # el, left, step, models_q06, peer_ready, run_begin
run_begin
B=$D/bin; M=/tmp/m9
[ -f $M/q06-Q4_K_M.gguf ] || models_q06 $M
peer_ready
G=$M/q06-Q4_K_M.gguf
step "pp8192 Q4_K_M new" 90 taskset -c 0,1 $B/bench_engine --threads 2 --runs 1 --only pp --long 8192 --gguf $G
step "pp8192 Q4_K_M llama.cpp" 240 taskset -c 0,1 $P/llama-bench -m $G -t 2 -p 8192 -n 0 -r 1 --no-warmup
step "pp8192 Q4_K_M new" 90 taskset -c 0,1 $B/bench_engine --threads 2 --runs 1 --only pp --long 8192 --gguf $G
el done
