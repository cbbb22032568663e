#!/usr/bin/env bash
# Device run 23 (session 7, branch cuda6): the split merge fused into the decode kernel
# (the last block of each (row, K/V head group) merges; the same bits). The tests, then
# the attention bench at 32x4K, 64x8K and 8x32K with the fused default (variants 0 and
# 31) around the separate merge kernel (30), A B A, and torch SDPA on the same shapes
# between the bench passes; 8x32K repeated bench / SDPA; memcheck of the bench on small
# shapes. One run of at most 100 s: every step under its own timeout.
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
el test_cuda_backend; timeout 40 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | grep -vE "^\[ (RUN|      OK) "; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 20 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "$F" | grep -E "PASSED|FAIL|differ"; echo "rc ${PIPESTATUS[0]}"
el "check-reference qwen3 --backend cuda"; timeout 15 "$D/bin/cairn" check-reference "$D/fixtures/models/qwen3" --backend cuda 2>&1 | tail -1; echo "rc ${PIPESTATUS[0]}"
el "bench_cuda_attention pass 1 (0 fused, 30 merge kernel, 31 fused; graph timing)"; CAIRN_BENCH_GRAPH=1 CAIRN_BENCH_VARIANTS=0,30,31 timeout 20 "$D/bin/bench_cuda_attention" $SH; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 25 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" $SH; echo "rc $?"
el "bench_cuda_attention pass 2"; CAIRN_BENCH_VARIANTS=0,30,31 timeout 15 "$D/bin/bench_cuda_attention" $SH; echo "rc $?"
for r in 1 2; do
  el "8x32K repeat $r: bench (0, 30, 31) then sdpa"; CAIRN_BENCH_VARIANTS=0,30,31 timeout 10 "$D/bin/bench_cuda_attention" 8:32768 | grep -E "^8x32768"
  PYTHONUNBUFFERED=1 timeout 15 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" 8:32768 | grep "flash+gqa"
done
el "memcheck bench_cuda_attention 4:1024 2:4608 1:4608 (1 rep)"; CAIRN_BENCH_REPS=1 CAIRN_BENCH_VARIANTS=0,22,24,30 timeout 15 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/bench_cuda_attention" 4:1024 2:4608 1:4608 2>&1 | tail -3; echo "rc ${PIPESTATUS[0]}"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-200 | head -150
