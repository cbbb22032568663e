#!/usr/bin/env bash
# Device run 24 (session 8, branch cuda7): numerics revision 3 (1024-key splits for rows
# at positions 2048-4095) and the fused split merge done by all threads of the last block
# (no bit changes). The tests (the new rule's boundaries, the fused tunings), check-reference
# qwen3; the attention bench on six shapes with the new default (0), the fused merge (30),
# revision 2's rule (32, the baseline: sessions 5-7's default) and fused (33), 1024-key
# splits (12), the default again (31), CUDA-graph timing; SDPA on the same shapes; then 8
# rounds of SDPA against the bench at 32x4K and 8x32K interleaved A B B A in one SDPA
# process (sdpa_decode.py --rounds), medians; the sanitizers on the final kernels (the
# fused merge included). Every step under its own timeout inside BUDGET seconds.
# Staged by `PACK=1 scripts/device/stage.sh build-cuda /work/main/.devcarry/cuda7 qwen3`;
# run as `bash .devcarry/cuda7/run_24.sh` (logs under $OUT).
D=$(cd "$(dirname "$0")" && pwd)
if [ -f "$D/pack.tar.xz" ]; then mkdir -p /tmp/c && tar -C /tmp/c -xJf "$D/pack.tar.xz" && D=/tmp/c; fi
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-230}
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
step() {
  local name=$1 max=$2; shift 2
  local l; l=$(left)
  if [ "$l" -le 5 ]; then el "SKIPPED (budget): $name"; return; fi
  [ "$max" -gt "$l" ] && max=$l
  el "$name"
  timeout "$max" "$@"; echo "rc $?"
}
LTD=$(dirname "$(ldconfig -p | grep -o '/[^ ]*libcublasLt.so.13$' | head -1)")
export LD_LIBRARY_PATH="$D/lib:$LTD:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export CAIRN_FIXTURES="$D/fixtures" CAIRN_WEIGHTS_ANON=0
F='^log: cuda backend: [0-9]+ x'
B=$D/bin
SH="32:4096 64:8192 8:32768 32:3072 1:4096 1:32768"
V=${V:-0,30,32,33,12,31}
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
grep -m1 'model name' /proc/cpuinfo
step test_cuda_backend 60 bash -c "'$B/test_cuda_backend' 2>&1 | grep -vE '$F' | grep -vE '^\[ (RUN|      OK) '; exit \${PIPESTATUS[0]}"
step test_cuda_engine 40 bash -c "'$B/test_cuda_engine' 2>&1 | grep -vE '$F' | tail -12; exit \${PIPESTATUS[0]}"
step "check-reference qwen3 --backend cuda" 30 bash -c "'$B/cairn' check-reference '$D/fixtures/models/qwen3' --backend cuda 2>&1 | tail -1; exit \${PIPESTATUS[0]}"
step "bench_cuda_attention pass 1 (variants $V, graph timing)" 40 env CAIRN_BENCH_GRAPH=1 CAIRN_BENCH_VARIANTS=$V "$B/bench_cuda_attention" $SH
step "sdpa" 30 env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 -W ignore "$D/sdpa_decode.py" 32:4096 64:8192 8:32768
step "bench_cuda_attention pass 2 (0,30,32,31)" 20 env CAIRN_BENCH_VARIANTS=0,30,32,31 "$B/bench_cuda_attention" 32:4096 64:8192 8:32768
step "8 rounds: sdpa against the bench (0,30,32) at 32x4K and 8x32K, A B B A" 70 \
  env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 -W ignore "$D/sdpa_decode.py" 32:4096 8:32768 --rounds 8 \
  --between "LD_LIBRARY_PATH='$LD_LIBRARY_PATH' CAIRN_BENCH_VARIANTS=0,30,32 '$B/bench_cuda_attention' 32:4096 8:32768 2>/dev/null | grep -E '^(32x4096|8x32768) '"
step "racecheck test_attention (CAIRN_TEST_SMALL=race)" 60 bash -c "CAIRN_TEST_SMALL=race CAIRN_TEST_FILTER=test_attention compute-sanitizer --tool racecheck --error-exitcode 9 '$B/test_cuda_backend' 2>&1 | grep -vE '$F' | tail -4; exit \${PIPESTATUS[0]}"
step "memcheck test_cuda_backend (CAIRN_TEST_SMALL=1)" 40 bash -c "CAIRN_TEST_SMALL=1 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 '$B/test_cuda_backend' 2>&1 | grep -vE '$F' | tail -4; exit \${PIPESTATUS[0]}"
step "memcheck bench_cuda_attention 4:1024 2:3072 2:4608 1:4608 (1 rep; 0,30,32,33,24)" 40 bash -c "CAIRN_BENCH_REPS=1 CAIRN_BENCH_VARIANTS=0,30,32,33,24 compute-sanitizer --tool memcheck --error-exitcode 9 '$B/bench_cuda_attention' 4:1024 2:3072 2:4608 1:4608 2>&1 | tail -3; exit \${PIPESTATUS[0]}"
el done
} > "$O/log" 2>&1
# Medians of q_ms (column 13) per shape and variant over every bench line of the run.
grep -E '^(32x4096|64x8192|8x32768|32x3072|1x4096|1x32768) ' "$O/log" | awk '{print $1, $2, $13}' | sort -k1,1 -k2,2n -k3,3g |
  awk '{k=$1" v"$2; a[k]=a[k]" "$3; n[k]++} END {for (k in a) {split(substr(a[k],2), x, " "); m=(n[k]%2)?x[(n[k]+1)/2]:(x[n[k]/2]+x[n[k]/2+1])/2; print k, "n", n[k], "median q_ms", m, "all", a[k]}}' |
  sort > "$O/medians"
cat "$O/medians" >> "$O/log"
grep -vE "^log: " "$O/log" | cut -c1-220 | head -200
