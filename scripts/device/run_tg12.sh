#!/usr/bin/env bash
# Device run "tg12" (issue 12, session 12, lead): decode, tg128 at 2 threads on cores 0,1,
# main (bin/bench_engine --only tg) and llama.cpp (`-p 0 -n 128 -r 1`), N L L N for Q4_K_M
# and Q8_0, on the folder run_pp12.sh staged (with this common.sh). `BUDGET=S bash
# .devcarry/pp12/run_tg12.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh" # el, left, step, models_q06, peer_ready, run_begin
run_begin
B=$D/bin; M=/tmp/m9
[ -f $M/q06-Q4_K_M.gguf ] && [ -f $M/q06-Q8_0.gguf ] || models_q06 $M
peer_ready
for t in Q4_K_M Q8_0; do
  for who in N L L N; do
    case $who in
      N) step "tg128 $t new" 40 taskset -c 0,1 $B/bench_engine --threads 2 --runs 1 --only tg --long 0 --gguf $M/q06-$t.gguf | grep -E 'tg128' ;;
      L) step "tg128 $t llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128 ;;
    esac
  done
done
el done
