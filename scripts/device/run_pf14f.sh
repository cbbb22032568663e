#!/usr/bin/env bash
# Device run "pf14f" (issue 12, session 14, lead): every #12 speed target on one device
# machine in one run, main aba504c: its 2-thread raw read; pp512 and tg128 at 2 threads
# (cores 0,1) for Q4_K_M and Q8_0, Cairn then llama.cpp; the 8K-token prompt (bench_engine
# --long 8192, 512-token steps) and llama.cpp's pp8192 for Q8_0 then Q4_K_M. Staged like
# run_pf14.sh into .devcarry/pf14; `BUDGET=S bash .devcarry/pf14/run_pf14f.sh`.
D=$(cd "$(dirname "$0")" && pwd)
. "$D/common.sh"
run_begin
B=$D/bin; M=/tmp/m14
grep -m1 'cache size' /proc/cpuinfo
[ -s $M/q06-Q4_K_M.gguf ] && [ -s $M/q06-Q8_0.gguf ] || models_q06 $M 2,3
ls -la $M
peer_ready
step "raw read, 2 threads" 60 $B/bench_llc_stream 2 0 sizes
PP="--threads 2 --runs 1 --only pp"; TG="--threads 2 --runs 1 --only tg --long 0"
for t in Q4_K_M Q8_0; do
  G=$M/q06-$t.gguf
  step "pp512 $t cairn" 30 taskset -c 0,1 $B/bench_engine $PP --long 0 --gguf $G | grep pp512
  step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $G -t 2 -p 512 -n 0 -r 1 2>&1 | grep pp512
  step "tg128 $t cairn" 30 taskset -c 0,1 $B/bench_engine $TG --gguf $G | grep tg128
  step "tg128 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $G -t 2 -p 0 -n 128 -r 1 2>&1 | grep tg128
done
for t in Q8_0 Q4_K_M; do
  G=$M/q06-$t.gguf
  step "pp8192 $t cairn" 100 taskset -c 0,1 $B/bench_engine $PP --long 8192 --gguf $G | grep -E '8192'
  step "pp8192 $t llama.cpp" 200 taskset -c 0,1 $P/llama-bench -m $G -t 2 -p 8192 -n 0 -r 1 2>&1 | grep pp8192
done
el done
