#!/usr/bin/env bash
# Device run 10 (session 4, branch cuda2): gemma3 on the GPU (its forward on backend
# memory): test_cuda_engine (now with gemma3's chunk and prefix-hit identity),
# test_cuda_backend (with compute_memory_info), check-reference gemma3 / qwen3 / llama
# --backend cuda, serve gemma3 --backend cuda answering one request, and compute-sanitizer
# memcheck over the attention test (the all-heads decode kernel's copies).
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el test_cuda_backend; timeout 120 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 120 "$D/bin/test_cuda_engine" 2>&1 | grep -E "OK|FAIL|PASS|rc|error|differ"; echo "rc ${PIPESTATUS[0]}"
for m in gemma3 qwen3 llama; do
  el "check-reference $m --backend cuda"; timeout 60 "$D/bin/cairn" check-reference "$D/fixtures/models/$m" --backend cuda -v 2>&1 | tail -12; echo "rc ${PIPESTATUS[0]}"
done
el "serve gemma3 --backend cuda"
"$D/bin/cairn" serve "$D/fixtures/models/gemma3" --backend cuda --port 18080 --cache-dir /tmp/srvcache > /tmp/serve.log 2>&1 &
SRV=$!
for i in $(seq 1 60); do curl -s -o /dev/null http://127.0.0.1:18080/health && break; sleep 0.5; done
curl -s -w '\nhttp %{http_code}\n' http://127.0.0.1:18080/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model":"gemma3","messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"temperature":0}' | tail -2 | cut -c1-300
kill -INT $SRV; wait $SRV; echo "serve rc $?"; grep -E "pool|error" /tmp/serve.log | head -4
el "memcheck test_attention (small)"; CAIRN_TEST_SMALL=1 CAIRN_TEST_FILTER=test_attention timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x" | tail -6; echo "rc ${PIPESTATUS[0]}"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-220 | head -150
