#!/usr/bin/env bash
# As run in session 14 on an uncommitted build where the column order (q8_0) also took the
# cursor D bytes ahead (no tile lead): the Q8_0 rows below measured that, then dropped.
# Device run "pf14" (issue 12, session 14, lead): the row kernels' stream-order prefetch
# (CAIRN_QMM_PF_AHEAD = D bytes: one cursor per range D bytes ahead of the consumed bytes,
# a line per 64 consumed, T0) against the tile order (D = 0, the default). The kernel tests
# with it in both tile orders; the 28 layers' q4_k / q6_k matmuls at 2 threads (bench_kernels
# BENCH_QUANT_LAYERS) for D = 0, 2048, 4096, 8192; tg128 at 2 threads on cores 0,1 for
# Q4_K_M and Q8_0, D = 0 / 4096 / 2048 / 8192 alternated with llama.cpp, and the range
# starts prefetched (F: CAIRN_QMM_PF_FIRST=1) and Q8_0 in the linear order (O1). Staged with
# stage_lead9.sh into .devcarry/pf14 (bin/ stripped to cairn, bench_engine, bench_kernels,
# test_quant_kernels); `BUDGET=S bash .devcarry/pf14/run_pf14.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh" # el, left, step, models_q06, peer_ready, run_begin
run_begin
B=$D/bin; M=/tmp/m14
models_q06 $M 2,3
ls -la $M
peer_ready
for o in 0 1; do step "test_quant_kernels ORDER=$o PF_AHEAD=3000 PF_FIRST=1" 60 taskset -c 2,3 env CAIRN_QMM_ORDER=$o CAIRN_QMM_PF_AHEAD=3000 CAIRN_QMM_PF_FIRST=1 $B/test_quant_kernels 2>&1 | grep -E 'PASSED|FAILED'; done
for d in 0 4096 2048 8192 0 4096; do
  step "28 layers PF_AHEAD=$d" 40 taskset -c 0,1 env CAIRN_QMM_PF_AHEAD=$d BENCH_QUANT_TYPES=q4_k,q6_k BENCH_QUANT_THREADS=2 BENCH_QUANT_LAYERS=1 BENCH_POOL_THREADS=2 $B/bench_kernels 5 | grep 'layers'
done
TG="--threads 2 --runs 1 --only tg --long 0"
for t in Q4_K_M Q8_0; do
  for c in 0 4096 L 2048 8192 0 4096 L F4096 O1; do
    case $c in
      L) step "tg128 $t llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128 ;;
      F4096) step "tg128 $t PF_AHEAD=4096 PF_FIRST=1" 40 taskset -c 0,1 env CAIRN_QMM_PF_AHEAD=4096 CAIRN_QMM_PF_FIRST=1 $B/bench_engine $TG --gguf $M/q06-$t.gguf | grep tg128 ;;
      O1) step "tg128 $t ORDER=1 PF_AHEAD=4096" 40 taskset -c 0,1 env CAIRN_QMM_ORDER=1 CAIRN_QMM_PF_AHEAD=4096 $B/bench_engine $TG --gguf $M/q06-$t.gguf | grep tg128 ;;
      *) step "tg128 $t PF_AHEAD=$c" 40 taskset -c 0,1 env CAIRN_QMM_PF_AHEAD=$c $B/bench_engine $TG --gguf $M/q06-$t.gguf | grep tg128 ;;
    esac
  done
done
el done
