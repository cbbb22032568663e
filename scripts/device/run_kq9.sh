#!/usr/bin/env bash
# Device run "kq9" (issue 12, session 9): the AMX-INT8 kernels' activation terms once per
# call (branch kq9) beside main and llama.cpp on the device's Xeon. Staged by
# scripts/device/stage_kq9.sh; run as `BUDGET=S bash .devcarry/kq9/run_kq9.sh` (log under $OUT).
#  1. test_quant_kernels (amx on the real tiles = scalar) and test_quant_amx_emulated;
#  2. bench_amx_parts, one thread, in the background while the rest runs: core 2 runs
#     (main new s3 s3p2) x 3, core 3 (new main s3p2 s3) x 3, 5 reps a line;
#  3. the models (cairn synth --preset qwen3-0.6b, hf2gguf.py, llama-quantize) on cores 4-15;
#  4. pp512 at 2 threads on cores 0,1 per type (Q4_K_M, Q8_0): C M V L L V M C (C this
#     branch, M main, V this branch with AMX_KQ_SCHED=3, L llama.cpp), then C with
#     CAIRN_OP_TIMES=1.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-200}
T0=$(date +%s)
. "$D/common.sh" # el, left, step, models_q06
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
exec > >(tee "$O/log") 2>&1
el "cpu (BUDGET=$BUDGET)"
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; grep -m1 'cpu MHz' /proc/cpuinfo; nproc
grep -o -w -E 'amx_[a-z0-9]+|avx512_bf16|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
B=$D/bin
step test_quant_kernels 40 taskset -c 4-7 "$B/test_quant_kernels"
step test_quant_amx_emulated 40 taskset -c 4-7 "$B/test_quant_amx_emulated"
( for i in 1 2 3; do for v in main new s3 s3p2; do
    echo "== parts.$v (core 2, round $i)"; timeout 30 taskset -c 2 "$B/parts.$v" 5; echo "rc $?"; done; done ) >/tmp/parts2.log 2>&1 &
AP=$!
( for i in 1 2 3; do for v in new main s3p2 s3; do
    echo "== parts.$v (core 3, round $i)"; timeout 30 taskset -c 3 "$B/parts.$v" 5; echo "rc $?"; done; done ) >/tmp/parts3.log 2>&1 &
AP2=$!
M=/tmp/m9; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
step synth 30 taskset -c 4-15 "$B/cairn" synth $M/hf --preset qwen3-0.6b >/dev/null
step hf2gguf 40 taskset -c 4-15 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null
step quantize-q8_0 30 taskset -c 4-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 12 >/dev/null 2>&1
step quantize-q4_k_m 30 taskset -c 4-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 12 >/dev/null 2>&1
rm -rf $M/hf $M/q06-bf16.gguf; ls -la $M
BEA="--threads 2 --runs 1 --only pp --long 0"
C() { step "pp512 $1 C (kq9)" 25 taskset -c 0,1 "$B/bench_engine" $BEA --gguf $M/q06-$1.gguf; }
Mn() { step "pp512 $1 M (main)" 25 taskset -c 0,1 "$B/bench_engine.main" $BEA --gguf $M/q06-$1.gguf; }
V() { step "pp512 $1 V (kq9, AMX_KQ_SCHED=3)" 25 taskset -c 0,1 "$B/bench_engine.s3" $BEA --gguf $M/q06-$1.gguf; }
L() { step "pp512 $1 L (llama.cpp)" 30 taskset -c 0,1 $P/llama-bench -m $M/q06-$1.gguf -t 2 -p 512 -n 0 -r 1; }
for t in Q4_K_M Q8_0; do
  C $t; Mn $t; V $t; L $t; L $t; V $t; Mn $t; C $t
  step "pp512 $t C (op times)" 25 taskset -c 0,1 env CAIRN_OP_TIMES=1 "$B/bench_engine" $BEA --gguf $M/q06-$t.gguf
done
el "waiting for bench_amx_parts"
wait $AP $AP2
echo "=== bench_amx_parts, core 2"; cat /tmp/parts2.log
echo "=== bench_amx_parts, core 3"; cat /tmp/parts3.log
el done
