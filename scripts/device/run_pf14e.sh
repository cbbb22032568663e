#!/usr/bin/env bash
# Device run "pf14e" (issue 12, session 14, lead): on the big-L3 Xeon (300 MiB) where
# decode is no longer bound by the memory: the row kernels' compute pace from L2 on one
# core (BENCH_QUANT_L2) and the 28 layers' q4_k / q6_k / q8_0 matmuls at 2 threads, default
# and the tile order (CAIRN_QMM_PF_AHEAD=0). Staged like run_pf14.sh.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh"
run_begin
B=$D/bin
grep -m1 'cache size' /proc/cpuinfo
for r in 1 2; do step "row kernels in L2, core 0" 60 taskset -c 0 env BENCH_QUANT_L2=1 BENCH_POOL_THREADS=1 $B/bench_kernels 3 | grep 'in L2'; done
for k in X=1 CAIRN_QMM_PF_AHEAD=0 X=1 CAIRN_QMM_PF_AHEAD=0; do
  step "28 layers ($k)" 60 taskset -c 0,1 env $k BENCH_QUANT_TYPES=q4_k,q6_k,q8_0 BENCH_QUANT_THREADS=2 BENCH_QUANT_LAYERS=1 BENCH_POOL_THREADS=2 $B/bench_kernels 5 | grep 'layers'
done
el done
