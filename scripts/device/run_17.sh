#!/usr/bin/env bash
# Device run 17 (session 6, branch cuda4 = main d3cddf1 before any change: main's merged
# CUDA build with the new CPU thread pool): the CUDA tests (also with
# CAIRN_CUDA_LONG_SPLITS=0), check-reference --backend cuda on the dense fixtures but qwen3_f32 (the 64 MiB carry), memcheck
# over test_cuda_backend, the attention bench (batch 1 x 32K included) and SDPA in the same
# run, and bench_cuda_engine end to end (0.6B and 8B shapes, invariant and fast; the 0.6B
# shape also with CAIRN_CUDA_LONG_SPLITS=0). Every step is independent, logs go to $OUT.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
F='^log: cuda backend: [0-9]+ x'
( "$D/bin/cairn" synth /tmp/q06 --preset qwen3-0.6b > /tmp/synth06.log 2>&1; echo "synth06 rc $?" >> /tmp/synth06.log
  "$D/bin/cairn" synth /tmp/q8b --arch qwen3 --layers 36 --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128 \
     --ffn 12288 --vocab 151936 --max-pos 40960 --rope-theta 1000000 > /tmp/synth8.log 2>&1; echo "synth8 rc $?" >> /tmp/synth8.log ) &
SYN=$!
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
el test_cuda_backend; timeout 150 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 150 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "$F" | tail -20; echo "rc ${PIPESTATUS[0]}"
el "test_cuda_engine CAIRN_CUDA_LONG_SPLITS=0"; CAIRN_CUDA_LONG_SPLITS=0 timeout 150 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "$F" | grep -E "numerics|PASSED|FAIL|OK" | head -12; echo "rc ${PIPESTATUS[0]}"
for m in llama llama31 qwen3 gemma3; do
  el "check-reference $m --backend cuda"; timeout 90 "$D/bin/cairn" check-reference "$D/fixtures/models/$m" --backend cuda -v 2>&1 | grep -vE "$F" | tail -6; echo "rc ${PIPESTATUS[0]}"
done
el "memcheck test_cuda_backend (CAIRN_TEST_SMALL=1)"; CAIRN_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | tail -4; echo "rc ${PIPESTATUS[0]}"
el bench_cuda_attention; timeout 150 "$D/bin/bench_cuda_attention" 32:4096 64:8192 8:32768 1:32768; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 120 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" 32:4096 64:8192 8:32768 1:32768; echo "rc $?"
} > "$O/tests.log" 2>&1
{
while ! grep -q synth06 /tmp/synth06.log 2>/dev/null; do sleep 1; done; tail -1 /tmp/synth06.log
el "e2e 0.6B invariant"; timeout 150 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06; echo "rc $?"
el "e2e 0.6B invariant, CAIRN_CUDA_LONG_SPLITS=0"; CAIRN_CUDA_LONG_SPLITS=0 timeout 150 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06s; echo "rc $?"
el "e2e 0.6B fast"; CAIRN_CUDA_INVARIANT=0 timeout 60 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06f --skip-ttft; echo "rc $?"
wait $SYN; tail -1 /tmp/synth8.log
el "e2e 8B invariant"; timeout 200 "$D/bin/bench_cuda_engine" /tmp/q8b /tmp/cc8; echo "rc $?"
el "e2e 8B fast"; CAIRN_CUDA_INVARIANT=0 timeout 90 "$D/bin/bench_cuda_engine" /tmp/q8b /tmp/cc8f --skip-ttft; echo "rc $?"
el done
} > "$O/e2e.log" 2>&1
grep -vE "^log: " "$O/tests.log" | cut -c1-200 | grep -vE "^\[ (RUN|      OK) " | grep -vE "^(32|64|8|1)x[0-9]+ +[0-9]+ " | head -150
grep -vE "^log: " "$O/e2e.log" | cut -c1-200 | head -60
