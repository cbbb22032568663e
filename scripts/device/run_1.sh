#!/usr/bin/env bash
# Device run 1: probe, CUDA unit and engine tests, check-reference on the dense fixtures,
# attention (vs torch SDPA) and GEMM benches, the 0.6B end-to-end bench, compute-sanitizer.
# Every step is independent (no set -e); logs go to $OUT.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
{
el probe
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
ldd --version | head -1; uname -r; nproc; free -g | head -2; df -h /tmp | tail -1
ldconfig -p | grep -E 'libcuda.so.1|libcublasLt.so.13'
LT=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -5); echo "cublasLt: $LT"
C1=$(ldconfig -p | grep -o '/[^ ]*libcuda.so.1' | head -1); [ -n "$C1" ] || C1=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name 'libcuda.so.1' 2>/dev/null | head -1); echo "libcuda: $C1"
which compute-sanitizer nvcc python3
} > "$O/probe.log" 2>&1
cat "$O/probe.log"
LTD=$(dirname "$(grep -o '/[^ ]*libcublasLt.so.13[^ ]*' "$O/probe.log" | head -1)")
C1D=$(dirname "$(grep -o '/[^ ]*libcuda.so.1' "$O/probe.log" | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:$C1D:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
ldd "$D/bin/cairn" | grep -E 'not found|cublas|libcuda' | tee -a "$O/probe.log"
# The 0.6B synth model, on the CPU while the GPU tests run.
( "$D/bin/cairn" synth /tmp/q06 --preset qwen3-0.6b > /tmp/synth06.log 2>&1; echo "synth rc $?" >> /tmp/synth06.log ) &
SYN=$!
{
el test_cuda_backend; CAIRN_TEST_DEBUG=1 timeout 300 "$D/bin/test_cuda_backend"; echo "rc $?"
el test_cuda_engine; timeout 300 "$D/bin/test_cuda_engine"; echo "rc $?"
} > "$O/tests.log" 2>&1
grep -vE "^log: cuda backend: [0-9]+ x" "$O/tests.log" | tail -45
{
for m in llama llama31 qwen3 qwen3_f32; do
  el "check-reference $m (cuda)"; timeout 120 "$D/bin/cairn" check-reference "$D/fixtures/models/$m" --backend cuda -v; echo "rc $?"
done
} > "$O/refcheck.log" 2>&1
grep -E "passed|FAIL|rc |max" "$O/refcheck.log" | cut -c1-150
{
el bench_cuda_attention; timeout 240 "$D/bin/bench_cuda_attention"; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 180 env -u LD_LIBRARY_PATH python3 "$D/sdpa_decode.py"; echo "rc $?"
el bench_cuda_gemm; timeout 240 "$D/bin/bench_cuda_gemm" 1 8 64 512 2048; echo "rc $?"
} > "$O/bench.log" 2>&1
grep -E "summary|^  |sdpa|TB/s|copy|rc " "$O/bench.log" | head -60
wait $SYN; cat /tmp/synth06.log | tail -2
{
el "e2e 0.6B invariant"; timeout 200 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06 --ttft-tokens 16384; echo "rc $?"
el "e2e 0.6B fast"; CAIRN_CUDA_INVARIANT=0 timeout 120 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06f --skip-ttft; echo "rc $?"
} > "$O/e2e.log" 2>&1
cat "$O/e2e.log"
{
el "memcheck test_cuda_backend"; CAIRN_TEST_FILTER='test_[ekia]*' timeout 200 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$D/bin/test_cuda_backend"; echo "rc $?"
el "racecheck attention"; CAIRN_TEST_FILTER=test_attention timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/bin/test_cuda_backend"; echo "rc $?"
} > "$O/sanitizer.log" 2>&1
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK|rc |Error|error" "$O/sanitizer.log" | head -20
el done
