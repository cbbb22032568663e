#!/usr/bin/env bash
# Device run 4 (the merged tree, main = f2e4940): CUDA unit and engine tests,
# check-reference --backend cuda on every dense fixture and gemma3, serve --backend cuda
# answering one request, attention vs torch SDPA, GEMMs vs cuBLASLt's heuristic, the
# end-to-end bench on the Qwen3-0.6B and 8B shapes (both modes), the raw disk read rate of
# the cold tier's objects (why restore is slower than recompute), and a build from source
# on the device in the background (to see whether the device can build the tree itself).
# Every step is independent (no set -e); logs go to $OUT.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
uname -r; nproc
# Build from source in the background (own log; 6 cores).
( cd "$D/tree" && cmake -S . -B /tmp/bt -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCAIRN_WERROR=ON -DCAIRN_CUDA=ON \
    && ninja -C /tmp/bt -j6 cairn test_cuda_backend test_cuda_engine; echo "device build rc $?" ) > "$O/devbuild.log" 2>&1 &
BLD=$!
( "$D/bin/cairn" synth /tmp/q06 --preset qwen3-0.6b > /tmp/synth06.log 2>&1; echo "synth06 rc $?" >> /tmp/synth06.log
  "$D/bin/cairn" synth /tmp/q8b --arch qwen3 --layers 36 --hidden 4096 --heads 32 --kv-heads 8 --head-dim 128 \
     --ffn 12288 --vocab 151936 --max-pos 40960 --rope-theta 1000000 > /tmp/synth8.log 2>&1; echo "synth8 rc $?" >> /tmp/synth8.log ) &
SYN=$!
{
el test_cuda_backend; timeout 120 "$D/bin/test_cuda_backend"; echo "rc $?"
el test_cuda_engine; timeout 120 "$D/bin/test_cuda_engine"; echo "rc $?"
for m in llama llama31 qwen3 qwen3_f32 gemma3; do
  el "check-reference $m"; timeout 90 "$D/bin/cairn" check-reference "$D/fixtures/models/$m" --backend cuda -v 2>&1 | tail -25; echo "rc ${PIPESTATUS[0]}"
done
el "serve --backend cuda"
"$D/bin/cairn" serve "$D/fixtures/models/qwen3" --backend cuda --port 18080 --cache-dir /tmp/srvcache -v > /tmp/serve.log 2>&1 &
SRV=$!
for i in $(seq 1 60); do curl -s -o /dev/null http://127.0.0.1:18080/health && break; sleep 0.5; done
curl -s -w '\nhttp %{http_code} in %{time_total} s\n' http://127.0.0.1:18080/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model":"qwen3","messages":[{"role":"user","content":"Hello, who are you?"}],"max_tokens":12,"temperature":0}'
curl -s http://127.0.0.1:18080/metrics | grep -iE "cuda|backend|tokens" | head -8
kill -INT $SRV; wait $SRV; echo "serve rc $?"; tail -15 /tmp/serve.log
} > "$O/tests.log" 2>&1
grep -vE "^log: cuda backend: [0-9]+ x" "$O/tests.log" | grep -E "OK|FAIL|PASSED|rc |passed|failed|error|Error|http|choices|content|---|max|margin" | cut -c1-220 | head -90
{
el bench_cuda_attention; timeout 120 "$D/bin/bench_cuda_attention"; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 100 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py"; echo "rc $?"
el bench_cuda_gemm; timeout 120 "$D/bin/bench_cuda_gemm" 1 8 64 512 2048; echo "rc $?"
} > "$O/bench.log" 2>&1
grep -vE "^log: cuda backend: [0-9]+ x" "$O/bench.log" | grep -E "summary|^  |sdpa|copy|rc |fail" | head -40
{
while ! grep -q synth06 /tmp/synth06.log 2>/dev/null; do sleep 1; done; tail -1 /tmp/synth06.log
el "e2e 0.6B invariant"; timeout 150 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06; echo "rc $?"
el "e2e 0.6B fast"; CAIRN_CUDA_INVARIANT=0 timeout 60 "$D/bin/bench_cuda_engine" /tmp/q06 /tmp/cc06f --skip-ttft; echo "rc $?"
wait $SYN; tail -1 /tmp/synth8.log
el "e2e 8B invariant"; timeout 200 "$D/bin/bench_cuda_engine" /tmp/q8b /tmp/cc8; echo "rc $?"
el "e2e 8B fast"; CAIRN_CUDA_INVARIANT=0 timeout 90 "$D/bin/bench_cuda_engine" /tmp/q8b /tmp/cc8f --skip-ttft; echo "rc $?"
el "disk: the 8B cold tier's objects, page cache dropped"
df -h /tmp | tail -1; du -sh /tmp/cc8
find /tmp/cc8 -type f -size +1M > /tmp/objs; wc -l < /tmp/objs
sync; echo 3 > /proc/sys/vm/drop_caches; S=$(date +%s.%N); xargs -a /tmp/objs cat > /dev/null; E=$(date +%s.%N)
echo "one reader: $(du -cb $(cat /tmp/objs) | tail -1 | cut -f1) bytes in $(awk "BEGIN{print $E - $S}") s"
for P in 4 16; do
  sync; echo 3 > /proc/sys/vm/drop_caches; S=$(date +%s.%N); xargs -a /tmp/objs -n 16 -P $P cat > /dev/null; E=$(date +%s.%N)
  echo "$P readers: $(awk "BEGIN{print $E - $S}") s"
done
} > "$O/e2e.log" 2>&1
grep -vE "^log: (kv cache|cold tier|cuda backend)" "$O/e2e.log" | head -60
wait $BLD; tail -5 "$O/devbuild.log"
el done
