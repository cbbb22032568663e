#!/usr/bin/env bash
# Device run 5: after gemma3/lfm2 refuse a backend without host memory: test_cuda_engine
# (its refusal test now covers gemma3), check-reference gemma3 --backend cuda and serve
# gemma3 --backend cuda (a clear error, no device fault), then compute-sanitizer's
# racecheck on the attention test (owed: it timed out at 60-100 s in runs 1-2) and
# memcheck over test_cuda_backend.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el test_cuda_engine; timeout 120 "$D/bin/test_cuda_engine"; echo "rc $?"
el "check-reference gemma3 (cuda)"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/gemma3" --backend cuda; echo "rc $?"
el "serve gemma3 --backend cuda"; timeout 60 "$D/bin/cairn" serve "$D/fixtures/models/gemma3" --backend cuda --port 18082 --cache-dir /tmp/sc; echo "rc $?"
el "check-reference qwen3 (cuda), after the change"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/qwen3" --backend cuda | tail -1; echo "rc $?"
el "racecheck attention"; CAIRN_TEST_SMALL=1 CAIRN_TEST_FILTER=test_attention timeout 330 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | tail -8; echo "rc ${PIPESTATUS[0]}"
el "memcheck test_cuda_backend"; CAIRN_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | tail -5; echo "rc ${PIPESTATUS[0]}"
el done
