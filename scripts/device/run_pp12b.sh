#!/usr/bin/env bash
# Device run "pp12b" (issue 12, session 12, lead), the second half of run_pp12.sh on the same
# staged folder: pp512 Q4_K_M at 2 threads, new / base (f316c63) interleaved N B B N N B B N,
# then the 8K-token prompt (bench_engine --long 8192, 512-token steps) new and base and
# llama.cpp's pp8192, once each. `BUDGET=S bash .devcarry/pp12/run_pp12b.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh" # el, left, step, models_q06, peer_ready, run_begin
run_begin
B=$D/bin; PP="--threads 2 --runs 1 --only pp"
M=/tmp/m9
[ -f $M/q06-Q4_K_M.gguf ] || models_q06 $M
peer_ready
G=$M/q06-Q4_K_M.gguf
for who in N B B N N B B N; do
  case $who in
    N) step "pp512 Q4_K_M new" 25 taskset -c 0,1 $B/bench_engine $PP --long 0 --gguf $G | grep pp512 ;;
    B) step "pp512 Q4_K_M base" 25 taskset -c 0,1 $B/bench_engine.base $PP --long 0 --gguf $G | grep pp512 ;;
  esac
done
step "pp8192 Q4_K_M new" 90 taskset -c 0,1 $B/bench_engine $PP --long 8192 --gguf $G | grep -E 'pp512|8192'
step "pp8192 Q4_K_M base" 90 taskset -c 0,1 $B/bench_engine.base $PP --long 8192 --gguf $G | grep -E 'pp512|8192'
step "pp8192 Q4_K_M llama.cpp" 150 taskset -c 0,1 $P/llama-bench -m $G -t 2 -p 8192 -n 0 -r 1 2>&1 | grep pp8192
el done
