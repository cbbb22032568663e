#!/usr/bin/env bash
# Device run 25 (session 8, branch cuda7): the final binary (run 24's kernels; the decode
# plan now counts block slots with the warps per head the call runs) against main's
# (9f6f693: numerics revision 2, session 7's plan and merge; bin/base/, built here from
# that tree) in the same run. The tests; the bench on nine shapes, ours (0 default, 30
# fused merge, 32 revision 2's rule, 12 1024-key splits) then main's default; then 8 rounds
# of SDPA against both benches at 32x4K, 64x8K and 8x32K, A B B A in one SDPA process;
# memcheck on the test; then the 16K cold TTFT of the 0.6B shape (bench_cuda_engine
# --skip-decode --skip-restore) twice plain and once with CAIRN_CUDA_PROFILE=1 (GPU time
# per kind of op, idle time between ops). Every step under its own timeout inside BUDGET.
# Staged by `PACK=1 EXTRA_BIN=<dir with base/bench_cuda_attention> scripts/device/stage.sh
# build-cuda /work/main/.devcarry/cuda7 qwen3 gemma3`; run as `bash .devcarry/cuda7/run_25.sh`.
D=$(cd "$(dirname "$0")" && pwd)
if [ -f "$D/pack.tar.xz" ]; then mkdir -p /tmp/c && tar -C /tmp/c -xJf "$D/pack.tar.xz" && D=/tmp/c; fi
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-170}
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
SH="32:4096 64:8192 8:32768 32:3072 24:4096 16:4096 4:32768 16:8192 1:4096"
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
grep -m1 'model name' /proc/cpuinfo
step test_cuda_backend 60 bash -c "'$B/test_cuda_backend' 2>&1 | grep -vE '$F' | grep -vE '^\[ (RUN|      OK) '; exit \${PIPESTATUS[0]}"
step test_cuda_engine 40 bash -c "'$B/test_cuda_engine' 2>&1 | grep -vE '$F' | tail -3; exit \${PIPESTATUS[0]}"
step "bench ours (0,30,32,12)" 30 env CAIRN_BENCH_VARIANTS=0,30,32,12 "$B/bench_cuda_attention" $SH
step "bench main 9f6f693 (0)" 20 env CAIRN_BENCH_VARIANTS=0 "$B/base/bench_cuda_attention" $SH
step "8 rounds: sdpa against ours (0,32) and main's (0) at 32x4K 64x8K 8x32K, A B B A" 80 \
  env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 -W ignore "$D/sdpa_decode.py" 32:4096 64:8192 8:32768 --rounds 8 \
  --between "export LD_LIBRARY_PATH='$LD_LIBRARY_PATH'; CAIRN_BENCH_VARIANTS=0,32 '$B/bench_cuda_attention' 32:4096 64:8192 8:32768 2>/dev/null | grep -E '^(32x4096|64x8192|8x32768) '; CAIRN_BENCH_VARIANTS=0 '$B/base/bench_cuda_attention' 32:4096 64:8192 8:32768 2>/dev/null | grep -E '^(32x4096|64x8192|8x32768) ' | sed 's/^/main /'"
( "$B/cairn" synth /tmp/q06 --preset qwen3-0.6b > /tmp/synth06.log 2>&1; echo "synth06 rc $?" >> /tmp/synth06.log ) &  # after the timings (it writes 1.2 GB)
step "memcheck test_cuda_backend (CAIRN_TEST_SMALL=1)" 30 bash -c "CAIRN_TEST_SMALL=1 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 '$B/test_cuda_backend' 2>&1 | grep -vE '$F' | tail -4; exit \${PIPESTATUS[0]}"
step "wait for synth" 60 bash -c 'while ! grep -q "synth06 rc" /tmp/synth06.log 2>/dev/null; do sleep 1; done; tail -1 /tmp/synth06.log'
for i in 1 2; do
  step "ttft 16K 0.6B ($i)" 30 bash -c "'$B/bench_cuda_engine' /tmp/q06 /tmp/cc06_$i --skip-decode --skip-restore 2>&1 | grep -E '^(ttft|summary)'"
done
step "ttft 16K 0.6B, CAIRN_CUDA_PROFILE=1" 30 bash -c "CAIRN_CUDA_PROFILE=1 '$B/bench_cuda_engine' /tmp/q06 /tmp/cc06_p --skip-decode --skip-restore 2>&1 | grep -E '^(ttft|summary)|cuda profile'"
el done
} > "$O/log" 2>&1
# Medians of q_ms per binary, shape and variant over every bench line of the run (main's
# lines are prefixed "main ").
grep -E '^(main )?[0-9]+x[0-9]+ ' "$O/log" | awk '{b="ours"; if ($1=="main") {b="main"; $1=""; $0=$0; } print b, $1, $2, $13}' |
  sort -k1,1 -k2,2 -k3,3n -k4,4g |
  awk '{k=$1" "$2" v"$3; a[k]=a[k]" "$4; n[k]++} END {for (k in a) {split(substr(a[k],2), x, " "); m=(n[k]%2)?x[(n[k]+1)/2]:(x[n[k]/2]+x[n[k]/2+1])/2; print k, "n", n[k], "median q_ms", m, "all", a[k]}}' |
  sort > "$O/medians"
cat "$O/medians" >> "$O/log"
grep -vE "^log: " "$O/log" | cut -c1-220 | tail -150
