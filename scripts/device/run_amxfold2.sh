#!/usr/bin/env bash
# Device run "amxfold2" (issue 12, session 8): the repeat of run_amxfold.sh's ambiguous parts,
# within BUDGET seconds (default 55). Staged by scripts/device/stage_amxfold.sh plus
# bin/bench_engine.v (this branch built with -DAMX_KQ_SCHED=2 -DAMX_B32_AHEAD=0); run as
# `bash .devcarry/amxfold/run_amxfold2.sh`. While the Q4_K_M model is made (cores 8-15):
# bench_amx_parts new kq2 ahead0 main, three rounds, core 2 (5 reps); then pp512 Q4_K_M at 2
# threads on cores 0,1 alternating C V M (branch, variant, main) while the budget lasts.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-55}
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}"
exec > >(tee "$O/log") 2>&1
el cpu; grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo
B=$D/bin; M=/tmp/amxm; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
( taskset -c 8-15 "$B/cairn" synth $M/hf --preset qwen3-0.6b >/dev/null &&
  taskset -c 8-15 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null &&
  taskset -c 8-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 8 >/dev/null; echo "models rc $?" ) > "$O/models.log" 2>&1 &
MP=$!
for round in 1 2 3; do
  for v in new kq2 ahead0 main; do
    el "bench_amx_parts $v (core 2)"; timeout 10 taskset -c 2 "$B/parts.$v" 5 | tail -3
  done
done
el "waiting for the model"; wait $MP; tail -1 "$O/models.log"
f=$M/q06-Q4_K_M.gguf
while [ "$(left)" -gt 6 ]; do
  for e in bench_engine bench_engine.v bench_engine.main; do
    [ "$(left)" -le 6 ] && break
    el "pp512 Q4_K_M $e"; timeout "$(left)" taskset -c 0,1 "$B/$e" --gguf $f --threads 2 --runs 1 --long 0 --only pp | tail -1
  done
done
el done
