#!/usr/bin/env bash
# Device run 20 (session 6, branch cuda4, final): the default tuning as the binary's default
# (blocks of all K/V heads, the tile that skips its empty rows), against blocks of 4 heads
# (LO and full tile), twice, with SDPA between; the CUDA tests under the new default.
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
el test_cuda_backend; timeout 100 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | grep -E "PASSED|FAIL|differs"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 100 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "$F" | grep -E "PASSED|FAIL|differ"; echo "rc ${PIPESTATUS[0]}"
el "bench_cuda_attention pass 1"; CAIRN_BENCH_VARIANTS=0,1,16,22 timeout 100 "$D/bin/bench_cuda_attention" 32:4096 64:8192 8:32768 1:32768; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 100 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" 32:4096 64:8192 8:32768; echo "rc $?"
el "bench_cuda_attention pass 2"; CAIRN_BENCH_VARIANTS=0,1,16,22 timeout 100 "$D/bin/bench_cuda_attention" 32:4096 64:8192 8:32768; echo "rc $?"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-200 | grep -vE "efficient|expanded" | head -80
