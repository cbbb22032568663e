#!/usr/bin/env bash
# Device run 12 (session 4, lead, main after merging hybrid-persist, cuda2, quant-speed,
# gguf-hybrid, agent2): the CUDA unit and engine tests on the merged tree (test_cuda_engine's
# restore tests run the cold tier's device-pool paths: restore into a device pool through the
# staging buffers, the capture's staged copies, events.json at close) and check-reference on
# qwen3 and gemma3 with the CUDA backend. Short: the session's device budget was ~350 s.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el test_cuda_backend; timeout 90 "$D/bin/test_cuda_backend" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x"; echo "rc ${PIPESTATUS[0]}"
el test_cuda_engine; timeout 120 "$D/bin/test_cuda_engine" 2>&1 | grep -vE "^log: cuda backend: [0-9]+ x" | tail -40; echo "rc ${PIPESTATUS[0]}"
for m in qwen3 gemma3; do
  el "check-reference $m --backend cuda"; timeout 40 "$D/bin/cairn" check-reference "$D/fixtures/models/$m" --backend cuda 2>&1 | tail -1; echo "rc ${PIPESTATUS[0]}"
done
el done
} > "$O/log" 2>&1
grep -vE "^log: " "$O/log" | cut -c1-220 | head -120
