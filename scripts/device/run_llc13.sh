#!/usr/bin/env bash
# As run in session 13 on commit 931b39e's knobs (CAIRN_QMM_NTA_MB existed only in that run's
# uncommitted build; CAIRN_QMM_PF_HINT / PF_SPREAD were removed after it): a record, not a rerun.
# Device run "llc13" (issue 12, session 13, lead): whether the device's 300 MiB L3 can hold
# part of a decode's weights between tokens. bin/bench_llc_stream (bench/bench_llc_stream.c)
# reads 32-512 MiB cyclically at 2 threads on cores 0,1 and then "layers + vocab head" splits
# with the head read plain or with prefetchnta, and a read at a row kernel's pace; then
# tg128 at 2 threads, main (N) against main with CAIRN_QMM_NTA_MB=64 (K: the 128 MB Q6_K
# vocab head streams with prefetchnta), main with CAIRN_QMM_TASKS=1 (T: one contiguous
# task per thread per product) and llama.cpp (L), N K T L N T K L for Q4_K_M and N T L T N
# for Q8_0; then bench_kernels' 28 layers with CAIRN_QMM_TASKS=1 and the default, twice. Staged by
# scripts/device/stage_lead9.sh into .devcarry/llc13 with bench_llc_stream, this script and
# common.sh copied in; `BUDGET=S bash .devcarry/llc13/run_llc13.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh" # el, left, step, models_q06, peer_ready, run_begin
run_begin
lscpu | grep -Ei 'model name|mhz|cache|numa node|socket'
echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
B=$D/bin; M=/tmp/m9
step "llc stream, 2 threads" 60 $B/bench_llc_stream 2 0
[ -f $M/q06-Q4_K_M.gguf ] && [ -f $M/q06-Q8_0.gguf ] || models_q06 $M 2,3
peer_ready
TG="--threads 2 --runs 1 --only tg --long 0"
for t in Q4_K_M Q8_0; do
  seq="N K T L N T K L"; [ $t = Q8_0 ] && seq="N T L T N"
  for who in $seq; do
    case $who in
      N) step "tg128 $t new" 40 taskset -c 0,1 $B/bench_engine $TG --gguf $M/q06-$t.gguf | grep -E 'tg128' ;;
      K) step "tg128 $t new NTA_MB=64" 40 taskset -c 0,1 env CAIRN_QMM_NTA_MB=64 $B/bench_engine $TG --gguf $M/q06-$t.gguf | grep -E 'tg128' ;;
      T) step "tg128 $t new TASKS=1" 40 taskset -c 0,1 env CAIRN_QMM_TASKS=1 $B/bench_engine $TG --gguf $M/q06-$t.gguf | grep -E 'tg128' ;;
      L) step "tg128 $t llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128 ;;
    esac
  done
done
for tk in 1 4 1 4; do
  step "28 layers, CAIRN_QMM_TASKS=$tk" 40 taskset -c 0,1 env CAIRN_QMM_TASKS=$tk BENCH_QUANT_LAYERS=1 BENCH_POOL_THREADS=2 $B/bench_kernels 3 | grep -E '2 thread'
done
step "llc stream, 1 thread" 40 $B/bench_llc_stream 1 0
el done
