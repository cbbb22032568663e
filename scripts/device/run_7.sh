#!/usr/bin/env bash
# Device run 7 (session 4, branch cuda2): the decode attention tuning. test_cuda_backend
# (its attention test now also checks every decode tuning bit for bit) and
# test_cuda_engine, then bench_cuda_attention over its variants (splits per work item,
# L2 prefetch; isolated and queued timings) and the SDPA baseline both ways.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
{
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
el test_cuda_backend; timeout 120 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 120 "$D/bin/test_cuda_engine" 2>&1 | grep -E "OK|FAIL|PASS|rc|error"; echo "rc ${PIPESTATUS[0]}"
el bench_cuda_attention; timeout 150 "$D/bin/bench_cuda_attention"; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 120 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py"; echo "rc $?"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | grep -E "OK|FAIL|PASS|rc |---|summary|^  B=|sdpa|copy|invariant|differ|written|^[0-9]+x" | cut -c1-200 | head -120
