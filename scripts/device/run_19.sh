#!/usr/bin/env bash
# Device run 19 (session 6, branch cuda4): the decode kernel of blocks of heads skips the
# softmax of the empty tile rows 8-15 (tile_chunk's LO; no bit changes), against the full
# tile (tuning full_tile = 1, the kernel before) in the same run. Tests (every tuning, the
# full tile included, bit for bit), check-reference qwen3 and gemma3, the attention bench
# and SDPA, racecheck over the attention test, memcheck over test_cuda_backend and over
# the bench, then bench_cuda_engine end to end (0.6B and 8B shapes, invariant).
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
for m in qwen3 gemma3; do
  el "check-reference $m --backend cuda"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/$m" --backend cuda 2>&1 | tail -1; echo "rc ${PIPESTATUS[0]}"
done
el bench_cuda_attention; timeout 150 "$D/bin/bench_cuda_attention" 32:4096 64:8192 8:32768 1:32768; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 120 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" 32:4096 64:8192 8:32768 1:32768; echo "rc $?"
el "racecheck test_attention (CAIRN_TEST_SMALL=race)"; CAIRN_TEST_SMALL=race CAIRN_TEST_FILTER=test_attention timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | tail -4; echo "rc ${PIPESTATUS[0]}"
el "memcheck test_cuda_backend (CAIRN_TEST_SMALL=1)"; CAIRN_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | tail -4; echo "rc ${PIPESTATUS[0]}"
el "memcheck bench_cuda_attention 4:1024 2:4608 (1 rep)"; CAIRN_BENCH_REPS=1 CAIRN_BENCH_VARIANTS=0,1,3,5,7,16,18,19,20 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/bench_cuda_attention" 4:1024 2:4608 2>&1 | tail -3; echo "rc ${PIPESTATUS[0]}"
} > "$O/log" 2>&1
{
while ! grep -q synth06 /tmp/synth06.log 2>/dev/null; do sleep 1; done; tail -1 /tmp/synth06.log
el "e2e 0.6B invariant"; timeout 100 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06; echo "rc $?"
wait $SYN; tail -1 /tmp/synth8.log
el "e2e 8B invariant"; timeout 150 "$D/bin/bench_cuda_engine" /tmp/q8b /tmp/cc8; echo "rc $?"
el done
} > "$O/e2e.log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-200 | grep -vE "^\[ (RUN|      OK) " | head -150
grep -vE "^log: " "$O/e2e.log" | cut -c1-200 | head -40
