#!/usr/bin/env bash
# Device run "kq9b" (issue 12, session 9): the second run of branch kq9, Q4_K_M only:
# AMX_KQ_SCHED=2 (the branch's default, C) against 3 (one row tile x two output groups, V),
# staged by scripts/device/stage_kq9.sh (same binaries as run_kq9.sh); run as
# `BUDGET=S bash .devcarry/kq9/run_kq9b.sh` (log under $OUT).
#  1. bench_amx_parts in the background: core 2 (new s3) x 3, core 3 (s3 new) x 3;
#  2. the Q4_K_M model (cairn synth, hf2gguf.py, llama-quantize) on cores 4-15;
#  3. pp512 Q4_K_M at 2 threads on cores 0,1: C V L V C V C (L llama.cpp).
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-100}
T0=$(date +%s)
. "$D/common.sh" # el, left, step, models_q06
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
exec > >(tee "$O/log") 2>&1
el "cpu (BUDGET=$BUDGET)"
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; nproc
B=$D/bin
( for i in 1 2 3; do for v in new s3; do
    echo "== parts.$v (core 2, round $i)"; timeout 30 taskset -c 2 "$B/parts.$v" 5; echo "rc $?"; done; done ) >/tmp/parts2.log 2>&1 &
AP=$!
( for i in 1 2 3; do for v in s3 new; do
    echo "== parts.$v (core 3, round $i)"; timeout 30 taskset -c 3 "$B/parts.$v" 5; echo "rc $?"; done; done ) >/tmp/parts3.log 2>&1 &
AP2=$!
M=/tmp/m9; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
step synth 30 taskset -c 4-15 "$B/cairn" synth $M/hf --preset qwen3-0.6b >/dev/null
step hf2gguf 40 taskset -c 4-15 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null
step quantize-q4_k_m 30 taskset -c 4-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 12 >/dev/null 2>&1
BEA="--threads 2 --runs 1 --only pp --long 0"
C() { step "pp512 $1 C (kq9, AMX_KQ_SCHED=2)" 25 taskset -c 0,1 "$B/bench_engine" $BEA --gguf $M/q06-$1.gguf; }
V() { step "pp512 $1 V (kq9, AMX_KQ_SCHED=3)" 25 taskset -c 0,1 "$B/bench_engine.s3" $BEA --gguf $M/q06-$1.gguf; }
L() { step "pp512 $1 L (llama.cpp)" 30 taskset -c 0,1 $P/llama-bench -m $M/q06-$1.gguf -t 2 -p 512 -n 0 -r 1; }
t=Q4_K_M
C $t; V $t; L $t; V $t; C $t; V $t; C $t
el "waiting for bench_amx_parts"
wait $AP $AP2
echo "=== bench_amx_parts, core 2"; cat /tmp/parts2.log
echo "=== bench_amx_parts, core 3"; cat /tmp/parts3.log
el done
