#!/usr/bin/env bash
# Device run 8 (session 4, branch cuda2): decode attention with the merge fused into the
# decode kernel and blocks of all K/V heads; the serve pool clamp by device memory.
# test_cuda_backend (the attention test checks every decode tuning bit for bit) and
# test_cuda_engine; bench_cuda_attention over its variants and the SDPA baseline, both
# timed isolated and queued; `cairn serve --backend cuda` sizing its pool by the device's
# free memory, and refusing a --pool-mib the device cannot hold.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
{
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
el test_cuda_backend; timeout 120 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 120 "$D/bin/test_cuda_engine" 2>&1 | grep -E "OK|FAIL|PASS|rc|error"; echo "rc ${PIPESTATUS[0]}"
el bench_cuda_attention; timeout 150 "$D/bin/bench_cuda_attention"; echo "rc $?"
el sdpa; PYTHONUNBUFFERED=1 timeout 120 env -u LD_LIBRARY_PATH python3 -W ignore "$D/sdpa_decode.py"; echo "rc $?"
el "serve --backend cuda: the pool sized by the device"
"$D/bin/cairn" serve "$D/fixtures/models/qwen3" --backend cuda --port 18080 --cache-dir /tmp/srvcache > /tmp/serve.log 2>&1 &
SRV=$!
for i in $(seq 1 60); do curl -s -o /dev/null http://127.0.0.1:18080/health && break; sleep 0.5; done
curl -s -w '\nhttp %{http_code}\n' http://127.0.0.1:18080/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model":"qwen3","messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"temperature":0}' | tail -1
kill -INT $SRV; wait $SRV; echo "serve rc $?"; grep -E "pool|memory|error" /tmp/serve.log | head -5
nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader
el "serve --backend cuda --pool-mib 400000 (more than the device holds)"
timeout 60 "$D/bin/cairn" serve "$D/fixtures/models/qwen3" --backend cuda --port 18081 --pool-mib 400000 --cache-dir /tmp/srvcache2; echo "rc $?"
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | grep -E "OK|FAIL|PASS|rc |---|summary|^  B=|sdpa|copy|invariant|differ|written|^[0-9]+x|serve|http|pool|MiB" | cut -c1-220 | head -120
