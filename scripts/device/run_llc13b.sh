#!/usr/bin/env bash
# As run in session 13 on commit 931b39e's knobs (CAIRN_QMM_NTA_MB existed only in that run's
# uncommitted build; CAIRN_QMM_PF_HINT / PF_SPREAD were removed after it): a record, not a rerun.
# Device run "llc13b" (issue 12, session 13, lead): what feeds the decode row kernels.
# bench_llc_stream's "work" section at 2 threads (a read at 4 or 8 vpdpbusd per line,
# calibrated in L2, with no software prefetch or one per line 1-16 KiB ahead); the row
# kernels' compute from L2 (bench_kernels BENCH_QUANT_L2, core 0), new (the k-quant rows
# through vpdpbusd + vpackssdw, q4_k's scales unpacked in vector lanes) against the base
# (bin/*.base, 931b39e); the 28 layers' q4_k and q6_k matmuls at 2 threads (D new, B base,
# S new with CAIRN_QMM_PF_SPREAD=1, H0 new with CAIRN_QMM_PF_HINT=0); then tg128 Q4_K_M,
# new (N), base (B), llama.cpp (L), spread (S), hint t0 (H): N B L N B L S H. First the
# kernel tests in both tile orders on this CPU.
# Staged like run_llc13.sh into .devcarry/llc13; `BUDGET=S bash .devcarry/llc13/run_llc13b.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh" # el, left, step, models_q06, peer_ready, run_begin
run_begin
B=$D/bin; M=/tmp/m9
for o in 0 1; do step "test_quant_kernels CAIRN_QMM_ORDER=$o" 60 taskset -c 2,3 env CAIRN_QMM_ORDER=$o $B/test_quant_kernels 2>&1 | grep -E 'PASSED|FAILED|^rc'; done
step "llc work, 2 threads" 40 $B/bench_llc_stream 2 0 work
for v in "" .base "" .base; do
  step "row kernels in L2, core 0, bench_kernels$v" 40 taskset -c 0 env BENCH_QUANT_L2=1 BENCH_POOL_THREADS=1 $B/bench_kernels$v 3 | grep 'in L2'
done
for c in D B S H0 D B S H0; do
  k=X=0; v=
  case $c in
    B) v=.base ;; S) k=CAIRN_QMM_PF_SPREAD=1 ;; H0) k=CAIRN_QMM_PF_HINT=0 ;;
  esac
  step "28 layers $c ($k bench_kernels$v)" 40 taskset -c 0,1 env $k BENCH_QUANT_TYPES=q4_k,q6_k BENCH_QUANT_THREADS=2 BENCH_QUANT_LAYERS=1 BENCH_POOL_THREADS=2 $B/bench_kernels$v 5 | grep 'layers'
done
[ -f $M/q06-Q4_K_M.gguf ] || models_q06 $M 2,3
peer_ready
TG="--threads 2 --runs 1 --only tg --long 0"
for who in N B L N B L S H; do
  case $who in
    N) step "tg128 new" 40 taskset -c 0,1 $B/bench_engine $TG --gguf $M/q06-Q4_K_M.gguf | grep -E 'tg128' ;;
    B) step "tg128 base" 40 taskset -c 0,1 $B/bench_engine.base $TG --gguf $M/q06-Q4_K_M.gguf | grep -E 'tg128' ;;
    S) step "tg128 new SPREAD=1" 40 taskset -c 0,1 env CAIRN_QMM_PF_SPREAD=1 $B/bench_engine $TG --gguf $M/q06-Q4_K_M.gguf | grep -E 'tg128' ;;
    H) step "tg128 new HINT=0" 40 taskset -c 0,1 env CAIRN_QMM_PF_HINT=0 $B/bench_engine $TG --gguf $M/q06-Q4_K_M.gguf | grep -E 'tg128' ;;
    L) step "tg128 llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $M/q06-Q4_K_M.gguf -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128 ;;
  esac
done
el done
