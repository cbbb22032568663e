#!/usr/bin/env bash
# Device run "pf14d" (issue 12, session 14, lead): on whichever device machine this is, its
# 2-thread raw read (bench_llc_stream 2 0 sizes) and then tg128 at 2 threads on cores 0,1,
# Q4_K_M default (the stream order on Intel) / CAIRN_QMM_PF_AHEAD=0 (the tile order) /
# llama.cpp three times, Q8_0 default / llama.cpp twice, then the raw read again. Staged
# like run_pf14.sh into .devcarry/pf14; `BUDGET=S bash .devcarry/pf14/run_pf14d.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh"
run_begin
B=$D/bin; M=/tmp/m14
[ -s $M/q06-Q4_K_M.gguf ] && [ -s $M/q06-Q8_0.gguf ] || models_q06 $M 2,3
ls -la $M
peer_ready
step "raw read, 2 threads" 90 $B/bench_llc_stream 2 0 sizes
TG="--threads 2 --runs 1 --only tg --long 0"
tg() { # type label env...
  local t=$1 l=$2; shift 2
  if [ "$l" = L ]; then step "tg128 $t llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128; return; fi
  step "tg128 $t $l" 40 taskset -c 0,1 env "$@" $B/bench_engine $TG --gguf $M/q06-$t.gguf | grep tg128
}
for r in 1 2 3; do tg Q4_K_M def X=1; tg Q4_K_M AHEAD=0 CAIRN_QMM_PF_AHEAD=0; tg Q4_K_M L; done
for r in 1 2; do tg Q8_0 def X=1; tg Q8_0 L; done
step "raw read, 2 threads" 90 $B/bench_llc_stream 2 0 sizes
el done
