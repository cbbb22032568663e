#!/usr/bin/env bash
# Device run "llc13b" (issue 12, session 13, lead): what feeds the decode row kernels.
# bench_llc_stream's "work" section at 2 and 1 threads (a read at 4 or 8 vpdpbusd per line,
# calibrated in L2, with no software prefetch or one per line 1-16 KiB ahead); the row
# kernels' compute from L2 (bench_kernels BENCH_QUANT_L2, core 0); the 28 layers' q4_k and
# q6_k matmuls at 2 threads under the prefetch knobs (D default, S CAIRN_QMM_PF_SPREAD=1,
# H0/H2 CAIRN_QMM_PF_HINT=0/2, R2 CAIRN_QMM_PF_STRIDE=2, T2/T0 CAIRN_QMM_PF_TILES=2/0); then
# tg128 Q4_K_M, main (N), spread (S), hint t0 (H) and llama.cpp (L), N S H L N S H L.
# Staged like run_llc13.sh into .devcarry/llc13; `BUDGET=S bash .devcarry/llc13/run_llc13b.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh" # el, left, step, models_q06, peer_ready, run_begin
run_begin
B=$D/bin; M=/tmp/m9
step "llc work, 2 threads" 40 $B/bench_llc_stream 2 0 work
step "llc work, 1 thread" 40 $B/bench_llc_stream 1 0 work
step "row kernels in L2, core 0" 40 taskset -c 0 env BENCH_QUANT_L2=1 BENCH_POOL_THREADS=1 $B/bench_kernels 3 | grep 'in L2'
for c in D S H0 H2 R2 T2 T0 D S H0; do
  case $c in
    D) k=X=0 ;; S) k=CAIRN_QMM_PF_SPREAD=1 ;; H0) k=CAIRN_QMM_PF_HINT=0 ;; H2) k=CAIRN_QMM_PF_HINT=2 ;;
    R2) k=CAIRN_QMM_PF_STRIDE=2 ;; T2) k=CAIRN_QMM_PF_TILES=2 ;; T0) k=CAIRN_QMM_PF_TILES=0 ;;
  esac
  step "28 layers $c ($k)" 40 taskset -c 0,1 env $k BENCH_QUANT_TYPES=q4_k,q6_k BENCH_QUANT_THREADS=2 BENCH_QUANT_LAYERS=1 BENCH_POOL_THREADS=2 $B/bench_kernels 5 | grep 'layers'
done
[ -f $M/q06-Q4_K_M.gguf ] || models_q06 $M 2,3
peer_ready
TG="--threads 2 --runs 1 --only tg --long 0"
for who in N S H L N S H L; do
  case $who in
    N) step "tg128 new" 40 taskset -c 0,1 $B/bench_engine $TG --gguf $M/q06-Q4_K_M.gguf | grep -E 'tg128' ;;
    S) step "tg128 new SPREAD=1" 40 taskset -c 0,1 env CAIRN_QMM_PF_SPREAD=1 $B/bench_engine $TG --gguf $M/q06-Q4_K_M.gguf | grep -E 'tg128' ;;
    H) step "tg128 new HINT=0" 40 taskset -c 0,1 env CAIRN_QMM_PF_HINT=0 $B/bench_engine $TG --gguf $M/q06-Q4_K_M.gguf | grep -E 'tg128' ;;
    L) step "tg128 llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $M/q06-Q4_K_M.gguf -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128 ;;
  esac
done
el done
