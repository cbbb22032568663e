#!/usr/bin/env bash
# Device run 2: tests, attention vs SDPA and GEMM benches (after the run-1 fixes), the
# end-to-end bench on the Qwen3-0.6B and 8B shapes (both modes), compute-sanitizer.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
# Synth models on the CPU while the GPU works: Qwen3-0.6B and the Qwen3-8B shape (16 GB).
( "$D/bin/cairn" synth /tmp/q06 --preset qwen3-0.6b > /tmp/synth06.log 2>&1; echo "synth06 rc $?" >> /tmp/synth06.log
  "$D/bin/cairn" synth /tmp/q8b --arch qwen3 --layers 36 --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128 \
     --ffn 12288 --vocab 151936 --max-pos 40960 --rope-theta 1000000 > /tmp/synth8.log 2>&1; echo "synth8 rc $?" >> /tmp/synth8.log ) &
SYN=$!
{
el test_cuda_backend; timeout 120 "$D/bin/test_cuda_backend"; echo "rc $?"
el test_cuda_engine; timeout 120 "$D/bin/test_cuda_engine"; echo "rc $?"
for m in llama llama31 qwen3 qwen3_f32; do
  el "check-reference $m"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/$m" --backend cuda | tail -4; echo "rc $?"
done
} > "$O/tests.log" 2>&1
grep -E "OK|FAIL|PASSED|rc |passed|matmul|attention " "$O/tests.log" | head -50
{
el bench_cuda_attention; timeout 120 "$D/bin/bench_cuda_attention"; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 100 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py"; echo "rc $?"
el bench_cuda_gemm; timeout 120 "$D/bin/bench_cuda_gemm" 1 8 64 512 2048; echo "rc $?"
} > "$O/bench.log" 2>&1
grep -vE "^log: cuda backend: [0-9]+ x" "$O/bench.log" | grep -E "summary|^  |sdpa|TB/s|copy|rc |fail|log:" | head -60
{
while ! grep -q synth06 /tmp/synth06.log 2>/dev/null; do sleep 1; done; tail -1 /tmp/synth06.log
el "e2e 0.6B invariant"; timeout 150 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06; echo "rc $?"
el "e2e 0.6B fast"; CAIRN_CUDA_INVARIANT=0 timeout 60 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06f --skip-ttft; echo "rc $?"
wait $SYN; tail -1 /tmp/synth8.log; du -sh /tmp/q8b
el "e2e 8B invariant"; timeout 200 "$D/bin/bench_cuda_engine" /tmp/q8b /tmp/cc8; echo "rc $?"
el "e2e 8B fast"; CAIRN_CUDA_INVARIANT=0 timeout 90 "$D/bin/bench_cuda_engine" /tmp/q8b /tmp/cc8f --skip-ttft; echo "rc $?"
} > "$O/e2e.log" 2>&1
grep -vE "^log: (kv cache|cuda backend: [0-9]+ x)" "$O/e2e.log" | head -60
{
el "memcheck"; CAIRN_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$D/bin/test_cuda_backend"; echo "rc $?"
el "racecheck"; CAIRN_TEST_SMALL=1 CAIRN_TEST_FILTER=test_attention timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/bin/test_cuda_backend"; echo "rc $?"
el "synccheck"; CAIRN_TEST_SMALL=1 CAIRN_TEST_FILTER=test_attention timeout 40 compute-sanitizer --tool synccheck --error-exitcode 9 "$D/bin/test_cuda_backend"; echo "rc $?"
} > "$O/sanitizer.log" 2>&1
grep -E "SUMMARY|rc |RUN|OK|FAIL" "$O/sanitizer.log" | head -30
el done
