#!/usr/bin/env bash
# Device run 11 (session 4, branch cuda2, after merging main with hybrid-persist when it
# has landed): test_cuda_backend and test_cuda_engine on the merged tree (its restore
# tests run the cold tier's device-pool paths: restore into a device pool inline, the
# capture's staged copies at the end of a turn; cairn_engine_device_memory), the attention
# bench and SDPA after the per-half rescale skip, then compute-sanitizer racecheck over the
# attention test (the all-heads decode kernel's shared stages; owed since run 10).
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el test_cuda_backend; timeout 120 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 150 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x" | tail -40; echo "rc ${PIPESTATUS[0]}"
el "check-reference qwen3 --backend cuda"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/qwen3" --backend cuda 2>&1 | tail -1; echo "rc ${PIPESTATUS[0]}"
el bench_cuda_attention; timeout 150 "$D/bin/bench_cuda_attention"; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 120 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py"; echo "rc $?"
el "racecheck test_attention (small)"; CAIRN_TEST_SMALL=1 CAIRN_TEST_FILTER=test_attention timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x" | tail -6; echo "rc ${PIPESTATUS[0]}"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-220 | head -150
