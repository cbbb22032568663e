#!/usr/bin/env bash
# Device run 22 (session 7, branch cuda5, final): 4 warps per head only where the call's
# blocks of single splits are fewer than the SMs (run 21: the default lost 20% at 4 x 32K);
# the tests under the final default, the attention bench (default 0 against session 6's
# default 22, A B A), end to end 0.6B.
D=$(cd "$(dirname "$0")" && pwd)
if [ -f "$D/pack.tar.xz" ]; then mkdir -p /tmp/c && tar -C /tmp/c -xJf "$D/pack.tar.xz" && D=/tmp/c; fi
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
F='^log: cuda backend: [0-9]+ x'
( "$D/bin/cairn" synth /tmp/q06 --preset qwen3-0.6b > /tmp/synth06.log 2>&1; echo "synth06 rc $?" >> /tmp/synth06.log ) &
{
el test_cuda_backend; timeout 150 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | grep -E "PASSED|FAIL|differs"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 150 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "$F" | grep -E "PASSED|FAIL|differ"; echo "rc ${PIPESTATUS[0]}"
el "check-reference qwen3 --backend cuda"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/qwen3" --backend cuda 2>&1 | tail -1; echo "rc ${PIPESTATUS[0]}"
el bench_cuda_attention; CAIRN_BENCH_VARIANTS=0,22,29 timeout 100 "$D/bin/bench_cuda_attention" 1:32768 2:32768 4:32768 1:8192 8:32768 32:4096; echo "rc $?"
wait
el "e2e 0.6B invariant"; timeout 100 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06; echo "rc $?"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-200 | head -80
