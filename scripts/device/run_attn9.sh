#!/usr/bin/env bash
# Device run "attn9" (issue 12, session 9): the tile order's K/V packed once per call and
# K/V head (branch attn9) against main's binaries and llama.cpp on the device's Xeon.
# Staged by scripts/device/stage_attn9.sh; run as `BUDGET=S bash .devcarry/attn9/run_attn9.sh`
# (log under $OUT). Every step runs under a timeout and is skipped once BUDGET s have passed.
#  1. cores 0,1: the attention tests on the real tiles under the defaults (test_attention_tile,
#     test_attention_tile_emulated, test_attn_tile_engine, test_determinism, test_attention),
#     then pp512 Q4_K_M at 2 threads: attn9, main, main, attn9;
#  2. core 2: bench_attention --ctx 2048,8192 --numerics tile (one thread): attn9, main,
#     main, attn9; core 3: attn9's rows per unit (CAIRN_ATTN_TILE_ROWS 64, 128) and its
#     pack off (CAIRN_ATTN_TILE_PACK=0, the per-unit loads) at 8K;
#  3. the Qwen3-0.6B shape (cairn synth, hf2gguf.py bf16, llama-quantize Q8_0 / Q4_K_M) on
#     cores 4-15, then the six pp8192 prompts at 2 threads at the same time, each on its own
#     core pair: attn9 Q4_K_M 4,5 / main Q4_K_M 6,7 / llama.cpp Q4_K_M 8,9 / attn9 Q8_0
#     10,11 / main Q8_0 12,13 / llama.cpp Q8_0 14,15; once 2 is done, attn9 Q4_K_M at 8K
#     with the probe's best rows per unit on cores 2,3.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-270}
T0=$(date +%s)
. "$D/common.sh" # el, left, step, models_q06
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
exec > >(tee "$O/log") 2>&1
el "cpu (BUDGET=$BUDGET)"
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; grep -m1 'cpu MHz' /proc/cpuinfo; nproc
grep -o -w -E 'amx_[a-z0-9]+|avx512_bf16|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
B=$D/bin
MB=$D/main
BAA="--ctx 2048,8192 --reps 3 --numerics tile"
( for t in test_attention_tile test_attention_tile_emulated test_attn_tile_engine test_determinism test_attention; do
    echo "--- [$(( $(date +%s) - T0 )) s] $t"; timeout 60 taskset -c 0,1 "$B/$t" 2>&1 | tail -25; echo "rc ${PIPESTATUS[0]}"
  done ) >/tmp/tests.log 2>&1 &
TPID=$!
( for who in attn9 main main attn9; do
    bin=$B; [ $who = main ] && bin=$MB
    echo "--- [$(( $(date +%s) - T0 )) s] bench_attention $who"; timeout 60 taskset -c 2 "$bin/bench_attention" $BAA; echo "rc $?"
  done ) >/tmp/ba.log 2>&1 &
BPID=$!
( for r in 64 128; do
    echo "--- [$(( $(date +%s) - T0 )) s] bench_attention attn9 CAIRN_ATTN_TILE_ROWS=$r"
    timeout 40 taskset -c 3 env CAIRN_ATTN_TILE_ROWS=$r "$B/bench_attention" --ctx 8192 --reps 3 --numerics tile; echo "rc $?"
  done
  echo "--- [$(( $(date +%s) - T0 )) s] bench_attention attn9 CAIRN_ATTN_TILE_PACK=0"
  timeout 40 taskset -c 3 env CAIRN_ATTN_TILE_PACK=0 "$B/bench_attention" --ctx 8192 --reps 3 --numerics tile; echo "rc $?"
) >/tmp/rows.log 2>&1 &
RPID=$!
M=/tmp/m9; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
step synth 30 taskset -c 4-15 "$B/cairn" synth $M/hf --preset qwen3-0.6b >/dev/null
step hf2gguf 40 taskset -c 4-15 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null
step quantize-q8_0 30 taskset -c 4-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 12 >/dev/null 2>&1
step quantize-q4_k_m 30 taskset -c 4-15 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 12 >/dev/null 2>&1
rm -rf $M/hf $M/q06-bf16.gguf; ls -la $M
NW=; $P/llama-bench --help 2>&1 | grep -q -- --no-warmup && NW=--no-warmup
PIDS=()
long8k() { # NAME CORES CMD...
  local name=$1 cores=$2; shift 2
  local max=$(( $(left) - 3 ))
  if [ "$max" -le 5 ]; then el "SKIPPED (budget): 8K $name"; return; fi
  ( echo "--- [$(( $(date +%s) - T0 )) s] start 8K: $name (cores $cores, timeout $max s)"; timeout $max taskset -c $cores "$@"
    echo "rc $? at $(( $(date +%s) - T0 )) s" ) >"/tmp/8k-$name.log" 2>&1 &
  PIDS+=($!)
}
BE="bench_engine --threads 2 --runs 1 --only pp"
long8k llama-Q4_K_M 8,9 $P/llama-bench -m $M/q06-Q4_K_M.gguf -t 2 -p 8192 -n 0 -r 1 $NW
long8k llama-Q8_0 14,15 $P/llama-bench -m $M/q06-Q8_0.gguf -t 2 -p 8192 -n 0 -r 1 $NW
long8k attn9-Q4_K_M 4,5 env CAIRN_OP_TIMES=1 $B/$BE --gguf $M/q06-Q4_K_M.gguf --long 8192
long8k main-Q4_K_M 6,7 env CAIRN_OP_TIMES=1 $MB/$BE --gguf $M/q06-Q4_K_M.gguf --long 8192
long8k attn9-Q8_0 10,11 $B/$BE --gguf $M/q06-Q8_0.gguf --long 8192
long8k main-Q8_0 12,13 $MB/$BE --gguf $M/q06-Q8_0.gguf --long 8192
wait $TPID; echo "=== tests (cores 0,1)"; cat /tmp/tests.log
for who in attn9 main main attn9; do
  bin=$B; [ $who = main ] && bin=$MB
  step "pp512 Q4_K_M $who" 25 taskset -c 0,1 $bin/$BE --gguf $M/q06-Q4_K_M.gguf --long 0
done
wait $BPID $RPID
echo "=== bench_attention (core 2)"; cat /tmp/ba.log
echo "=== rows / pack probe (core 3)"; cat /tmp/rows.log
BEST=0; BT=$(awk '/ctx +8192/ && /tile/ {for (i = 1; i <= NF; i++) if ($i == "ms") {print $(i - 1); exit}}' /tmp/ba.log)
for r in 64 128; do
  t=$(awk -v r="ROWS=$r" '$0 ~ r {f = 1} f && /ctx +8192/ && /tile/ {for (i = 1; i <= NF; i++) if ($i == "ms") {print $(i - 1); exit}}' /tmp/rows.log)
  echo "rows probe: CAIRN_ATTN_TILE_ROWS=$r -> 8K chunk ${t:-?} ms (default: ${BT:-?} ms)"
  [ -n "$t" ] && [ -n "$BT" ] && awk -v a="$t" -v b="$BT" 'BEGIN {exit !(a < b)}' && { BEST=$r; BT=$t; }
done
if [ "$BEST" != 0 ]; then
  long8k attn9-rows$BEST-Q4_K_M 2,3 env CAIRN_ATTN_TILE_ROWS=$BEST $B/$BE --gguf $M/q06-Q4_K_M.gguf --long 8192
fi
el "waiting for the 8K prompts"
[ ${#PIDS[@]} -gt 0 ] && wait "${PIDS[@]}"
for f in /tmp/8k-*.log; do [ -f "$f" ] && { echo "=== $f"; grep -v '^llama_model_loader\|^load\|^print_info\|^llama_\|^\.' "$f" | tail -40; }; done
el done
