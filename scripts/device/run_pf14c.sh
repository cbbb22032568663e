#!/usr/bin/env bash
# Ran on an uncommitted build with the measuring knobs X_COL / X_HINT (removed after it).
# Device run "pf14c" (issue 12, session 14, lead; uncommitted measuring build with X_COL /
# X_HINT): q8_0's column order with a cursor one tile (X_COL=1) or one tile + 4 KiB
# (X_COL=4096) ahead, q8_0 in the linear order with the tile scheme (ORDER=1 AHEAD=0) and the
# stream (ORDER=1); Q4_K_M's stream with T1 (X_HINT=1) and D=3072.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh"
run_begin
B=$D/bin; M=/tmp/m14
[ -s $M/q06-Q4_K_M.gguf ] && [ -s $M/q06-Q8_0.gguf ] || models_q06 $M 2,3
ls -la $M
peer_ready
TG="--threads 2 --runs 1 --only tg --long 0"
tg() { # type label env...
  local t=$1 l=$2; shift 2
  if [ "$l" = L ]; then step "tg128 $t llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128; return; fi
  step "tg128 $t $l" 40 taskset -c 0,1 env "$@" $B/bench_engine $TG --gguf $M/q06-$t.gguf | grep tg128
}
for r in 1 2; do
  tg Q8_0 def X=1; tg Q8_0 X_COL=1 X_COL=1; tg Q8_0 X_COL=4096 X_COL=4096; tg Q8_0 L
  tg Q8_0 "ORDER=1 AHEAD=0" CAIRN_QMM_ORDER=1 CAIRN_QMM_PF_AHEAD=0; tg Q8_0 "ORDER=1" CAIRN_QMM_ORDER=1
done
for r in 1 2; do
  tg Q4_K_M def X=1; tg Q4_K_M X_HINT=1 X_HINT=1; tg Q4_K_M AHEAD=3072 CAIRN_QMM_PF_AHEAD=3072; tg Q4_K_M L
done
el done
