#!/usr/bin/env bash
# Device run 21 (session 7, branch cuda5): decode blocks of heads with 2 or 4 warps per K/V
# head (each computes part of the PV product's output dims: no bit changes), the default
# now 4 warps per head where the call's blocks hold 1-2 heads (small batches); the
# attention bench with a CUDA-graph timing (launch overhead) on six shapes, SDPA between,
# 8x32K repeated (bench / SDPA interleaved); the tests, check-reference on the dense
# fixtures, the sanitizers on the changed kernels; end to end (0.6B, 8B), and the 16K
# cold TTFT of run 4's tree (f2e4940, its own bench and synth: bin/r4/) beside this
# branch's, interleaved, with nsys kernel sums if the device has nsys.
D=$(cd "$(dirname "$0")" && pwd)
if [ -f "$D/pack.tar.xz" ]; then mkdir -p /tmp/c && tar -C /tmp/c -xJf "$D/pack.tar.xz" && D=/tmp/c; fi
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
F='^log: cuda backend: [0-9]+ x'
( "$D/bin/cairn" synth /tmp/q06 --preset qwen3-0.6b > /tmp/synth06.log 2>&1; echo "synth06 rc $?" >> /tmp/synth06.log
  "$D/bin/r4/cairn" synth /tmp/q06r4 --preset qwen3-0.6b > /tmp/synth06r4.log 2>&1; echo "synth06r4 rc $?" >> /tmp/synth06r4.log
  "$D/bin/cairn" synth /tmp/q8b --arch qwen3 --layers 36 --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128 \
     --ffn 12288 --vocab 151936 --max-pos 40960 --rope-theta 1000000 > /tmp/synth8.log 2>&1; echo "synth8 rc $?" >> /tmp/synth8.log ) &
SYN=$!
SH="32:4096 64:8192 8:32768 1:32768 4:32768 1:8192"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
echo "nsys: $(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || echo none)"
el test_cuda_backend; timeout 150 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | grep -vE "^\[ (RUN|      OK) "; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 150 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "$F" | tail -12; echo "rc ${PIPESTATUS[0]}"
for m in llama llama31 qwen3 qwen3_f32 gemma3; do
  el "check-reference $m --backend cuda"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/$m" --backend cuda 2>&1 | tail -1; echo "rc ${PIPESTATUS[0]}"
done
V=0,1,9,12,22,23,24,25,26,27,28,29
el "bench_cuda_attention pass 1 (graph timing)"; CAIRN_BENCH_GRAPH=1 CAIRN_BENCH_VARIANTS=$V timeout 150 "$D/bin/bench_cuda_attention" $SH; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 120 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" $SH; echo "rc $?"
el "bench_cuda_attention pass 2"; CAIRN_BENCH_VARIANTS=0,22,24,29 timeout 100 "$D/bin/bench_cuda_attention" 32:4096 1:32768 4:32768; echo "rc $?"
for r in 1 2 3; do
  el "8x32K repeat $r: bench (0, 22, 0) then sdpa"; CAIRN_BENCH_VARIANTS=0,22,29 timeout 60 "$D/bin/bench_cuda_attention" 8:32768 | grep -E "^(copy|8x32768)"
  PYTHONUNBUFFERED=1 timeout 60 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py" 8:32768 | grep "flash+gqa"
done
el "racecheck test_attention (CAIRN_TEST_SMALL=race)"; CAIRN_TEST_SMALL=race CAIRN_TEST_FILTER=test_attention timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | tail -4; echo "rc ${PIPESTATUS[0]}"
el "memcheck test_cuda_backend (CAIRN_TEST_SMALL=1)"; CAIRN_TEST_SMALL=1 timeout 100 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "$F" | tail -4; echo "rc ${PIPESTATUS[0]}"
el "memcheck bench_cuda_attention 4:1024 2:4608 1:4608 (1 rep)"; CAIRN_BENCH_REPS=1 CAIRN_BENCH_VARIANTS=0,22,23,24,25,26,27,28 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/bench_cuda_attention" 4:1024 2:4608 1:4608 2>&1 | tail -3; echo "rc ${PIPESTATUS[0]}"
} > "$O/log" 2>&1
{
while ! grep -q "synth06r4 rc" /tmp/synth06r4.log 2>/dev/null; do sleep 1; done; tail -1 /tmp/synth06.log; tail -1 /tmp/synth06r4.log
for r in 1 2; do
  el "ttft 0.6B run 4's tree ($r)"; timeout 60 "$D/bin/r4/bench_cuda_engine" /tmp/q06r4 /tmp/cc06r4_$r --decode-steps 8 2>&1 | grep -E "ttft|decode|rc"
  el "ttft 0.6B this branch ($r)"; timeout 60 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06_$r --decode-steps 8 2>&1 | grep -E "ttft|decode|rc"
done
if command -v nsys >/dev/null; then
  el "nsys run 4's tree, ttft only"; timeout 60 nsys profile -o /tmp/r4 --force-overwrite true "$D/bin/r4/bench_cuda_engine" /tmp/q06r4 /tmp/cc06r4_n --decode-steps 1 > /dev/null 2>&1
  timeout 60 nsys stats -r cuda_gpu_kern_sum,cuda_api_sum /tmp/r4.nsys-rep 2>&1 | head -40 > "$O/nsys_r4.txt"
  el "nsys this branch, ttft only"; timeout 60 nsys profile -o /tmp/r21 --force-overwrite true "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06_n --decode-steps 1 > /dev/null 2>&1
  timeout 60 nsys stats -r cuda_gpu_kern_sum,cuda_api_sum /tmp/r21.nsys-rep 2>&1 | head -40 > "$O/nsys_r21.txt"
fi
el "e2e 0.6B invariant"; timeout 100 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06; echo "rc $?"
wait $SYN; tail -1 /tmp/synth8.log
el "e2e 8B invariant"; timeout 150 "$D/bin/bench_cuda_engine" /tmp/q8b /tmp/cc8; echo "rc $?"
el done
} > "$O/e2e.log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-200 | head -150
grep -vE "^log: " "$O/e2e.log" | cut -c1-200 | head -60
