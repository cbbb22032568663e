#!/usr/bin/env bash
# Device run 18 (session 6, branch cuda4): decode blocks of heads with 3, 4 or 8
# shared-memory stages (8 by default when every block of the call runs at once: the batch
# 1 x 32K case). Tests (every tuning, the stages included, bit for bit), check-reference
# qwen3, the attention bench (the stage variants 16-22 beside run 16's) and SDPA in the same
# run, racecheck over the attention test, memcheck over test_cuda_backend and over the bench
# with the stage variants.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
F='^log: cuda backend: [0-9]+ x'
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
el test_cuda_backend; timeout 150 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 150 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "$F" | tail -20; echo "rc ${PIPESTATUS[0]}"
el "check-reference qwen3 --backend cuda"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/qwen3" --backend cuda 2>&1 | tail -1; echo "rc ${PIPESTATUS[0]}"
el bench_cuda_attention; timeout 150 "$D/bin/bench_cuda_attention" 32:4096 64:8192 8:32768 1:32768 1:8192; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 120 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" 32:4096 64:8192 8:32768 1:32768 1:8192; echo "rc $?"
el "racecheck test_attention (CAIRN_TEST_SMALL=race)"; CAIRN_TEST_SMALL=race CAIRN_TEST_FILTER=test_attention timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | tail -6; echo "rc ${PIPESTATUS[0]}"
el "memcheck test_cuda_backend (CAIRN_TEST_SMALL=1)"; CAIRN_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | tail -4; echo "rc ${PIPESTATUS[0]}"
el "memcheck bench_cuda_attention 4:1024 2:4608 1:8192 (1 rep)"; CAIRN_BENCH_REPS=1 CAIRN_BENCH_VARIANTS=0,3,5,17,18,19,20,21,22 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/bench_cuda_attention" 4:1024 2:4608 1:8192 2>&1 | tail -4; echo "rc ${PIPESTATUS[0]}"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-200 | grep -vE "^\[ (RUN|      OK) " | head -220
