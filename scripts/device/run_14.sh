#!/usr/bin/env bash
# Device run 14 (session 5, branch cuda3): run 13 again after its findings: the cp.async
# L2 prefetch hint fixed at 256 bytes (a run-time choice cost the all-heads kernel 57
# registers and ~20% of its speed), blocks of 1, 2, 4 or 8 K/V heads (default: up to 4,
# fewer when the batch is small), early issue as a tuning. Tests, check-reference qwen3,
# the attention bench and SDPA in the same run, racecheck and memcheck over the attention
# test and the bench at small shapes, ncu on the default decode kernel at 8x32K.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
NCU_SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
el test_cuda_backend; timeout 150 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 150 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x" | tail -40; echo "rc ${PIPESTATUS[0]}"
el "check-reference qwen3 --backend cuda"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/qwen3" --backend cuda 2>&1 | tail -1; echo "rc ${PIPESTATUS[0]}"
el bench_cuda_attention; timeout 150 "$D/bin/bench_cuda_attention" 32:4096 64:8192 8:32768 1:32768; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 120 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" 32:4096 64:8192 8:32768 1:32768; echo "rc $?"
el "racecheck test_attention (CAIRN_TEST_SMALL=race)"; CAIRN_TEST_SMALL=race CAIRN_TEST_FILTER=test_attention timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x" | tail -8; echo "rc ${PIPESTATUS[0]}"
el "memcheck test_cuda_backend (CAIRN_TEST_SMALL=1)"; CAIRN_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x" | tail -6; echo "rc ${PIPESTATUS[0]}"
el "memcheck bench_cuda_attention 4:1024 2:4608 (1 rep)"; CAIRN_BENCH_REPS=1 CAIRN_BENCH_VARIANTS=0,1,2,4,6,8,9,17 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/bench_cuda_attention" 4:1024 2:4608 2>&1 | tail -4; echo "rc ${PIPESTATUS[0]}"
el "ncu decode kernel, 8x32768, variant 0"; CAIRN_BENCH_REPS=1 CAIRN_BENCH_VARIANTS=0 timeout 60 ncu --clock-control none -k regex:attn_kernel -c 1 $NCU_SEC "$D/bin/bench_cuda_attention" 8:32768 > "$O/ncu_v0.txt" 2>&1; echo "rc $?"
grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Registers Per|Grid Size|Block Size|Warp Cycles Per Issued" "$O/ncu_v0.txt" | cut -c1-200 | head -16
el "racecheck bench_cuda_attention 2:4608 (variant 0, 1 rep)"; CAIRN_BENCH_REPS=1 CAIRN_BENCH_VARIANTS=0 timeout 75 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/bin/bench_cuda_attention" 2:4608 2>&1 | tail -4; echo "rc ${PIPESTATUS[0]}"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-200 | grep -vE "^\[ (RUN|      OK) " | head -200
