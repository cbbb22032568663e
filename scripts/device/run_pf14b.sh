#!/usr/bin/env bash
# Device run "pf14b" (issue 12, session 14, lead): the stream-order prefetch as committed
# (linear tile order only; default CAIRN_QMM_PF_AHEAD=4096 on Intel, so "def" is it):
# the kernel tests at the default; the 28 layers' q4_k / q6_k matmuls at 2 threads, default
# against D = 0 and 8192; tg128 at 2 threads on cores 0,1: Q4_K_M def / 0 / llama.cpp /
# 8192 / 6144, three times, Q8_0 (column order: the knob no longer touches it) def / 0 /
# llama.cpp twice. Staged like run_pf14.sh into .devcarry/pf14;
# `BUDGET=S bash .devcarry/pf14/run_pf14b.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh" # el, left, step, models_q06, peer_ready, run_begin
run_begin
B=$D/bin; M=/tmp/m14
[ -s $M/q06-Q4_K_M.gguf ] && [ -s $M/q06-Q8_0.gguf ] || models_q06 $M 2,3
ls -la $M
peer_ready
for o in 0 1; do step "test_quant_kernels ORDER=$o (default PF_AHEAD)" 60 taskset -c 2,3 env CAIRN_QMM_ORDER=$o $B/test_quant_kernels 2>&1 | grep -E 'PASSED|FAILED'; done
for d in def 0 8192 def 0 8192; do
  k=X=1; [ $d = def ] || k=CAIRN_QMM_PF_AHEAD=$d
  step "28 layers PF_AHEAD=$d" 40 taskset -c 0,1 env $k BENCH_QUANT_TYPES=q4_k,q6_k BENCH_QUANT_THREADS=2 BENCH_QUANT_LAYERS=1 BENCH_POOL_THREADS=2 $B/bench_kernels 5 | grep 'layers'
done
TG="--threads 2 --runs 1 --only tg --long 0"
tg() { # type who
  case $2 in
    L) step "tg128 $1 llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $M/q06-$1.gguf -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128 ;;
    def) step "tg128 $1 default" 40 taskset -c 0,1 $B/bench_engine $TG --gguf $M/q06-$1.gguf | grep tg128 ;;
    *) step "tg128 $1 PF_AHEAD=$2" 40 taskset -c 0,1 env CAIRN_QMM_PF_AHEAD=$2 $B/bench_engine $TG --gguf $M/q06-$1.gguf | grep tg128 ;;
  esac
}
for r in 1 2 3; do for c in def 0 L 8192 6144; do tg Q4_K_M $c; done; done
for r in 1 2; do for c in def 0 L; do tg Q8_0 $c; done; done
el done
