#!/usr/bin/env bash
# Device run 23 (session 7, branch cuda6): the split merge fused into the decode kernel
# (the last block of each (row, K/V head group) merges; the same bits). The tests, then
# the attention bench at 32x4K, 64x8K and 8x32K with the fused default (variants 0 and
# 31) around the separate merge kernel (30), A B A, and torch SDPA on the same shapes
# between the bench passes; 8x32K once more, SDPA then bench. Lean (the session's device
# budget was near the lead's reserve): ~40 s at most, every step under its own timeout.
D=$(cd "$(dirname "$0")" && pwd)
if [ -f "$D/pack.tar.xz" ]; then mkdir -p /tmp/c && tar -C /tmp/c -xJf "$D/pack.tar.xz" && D=/tmp/c; fi
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
F='^log: cuda backend: [0-9]+ x'
SH="32:4096 64:8192 8:32768"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
el test_cuda_backend; timeout 30 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | grep -vE "^\[ (RUN|      OK) "; echo "rc ${PIPESTATUS[0]}"
el "bench_cuda_attention pass 1 (0 fused, 30 merge kernel, 31 fused; graph timing)"; CAIRN_BENCH_GRAPH=1 CAIRN_BENCH_VARIANTS=0,30,31 timeout 10 "$D/bin/bench_cuda_attention" $SH; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 20 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" $SH; echo "rc $?"
el "bench_cuda_attention pass 2"; CAIRN_BENCH_VARIANTS=0,30,31 timeout 10 "$D/bin/bench_cuda_attention" $SH; echo "rc $?"
el "8x32K again: sdpa then bench (0, 30, 31)"; PYTHONUNBUFFERED=1 timeout 12 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" 8:32768 | grep "flash+gqa"
CAIRN_BENCH_VARIANTS=0,30,31 timeout 6 "$D/bin/bench_cuda_attention" 8:32768 | grep -E "^8x32768"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-200 | head -150
