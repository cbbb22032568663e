#!/usr/bin/env bash
# Device run "amxtile" (issue 12, session 8): the tile order of bf16 K/V attention on the
# device machine's Intel Xeon (AMX-BF16 tiles, K = 32 steps; attention_impl.h 1T / 4T)
# against the f32 order and llama.cpp. Staged by scripts/device/stage_amxtile.sh; run as
# `PLAN=check|final BUDGET=S bash .devcarry/amxtile/run_amxtile.sh` (log under $OUT). Every
# step runs under a timeout and is skipped once BUDGET seconds have passed.
#  PLAN=check (first run: correctness and a first timing):
#   1. the CPU, AMX flags; test_attention_tile (real tiles: decode = prefill = chunks =
#      threads bit for bit, accuracy), test_attention_tile_emulated (the AVX-512 packing on
#      modelled tiles), test_backend, test_attention, test_attn_tile_engine and
#      test_determinism under CAIRN_ATTN_BF16TILE=1 (cores 0,1);
#   2. bench_attention on core 2 in the background (512-query chunks at 2K and 8K, decode;
#      f32 / tile interleaved in one process, thread CPU time, median of 3);
#   3. the Qwen3-0.6B shape (cairn synth, hf2gguf.py bf16, llama-quantize Q8_0, Q4_K_M);
#   4. pp8192 at 2 threads under the tile order, Q4_K_M on 4,5 and Q8_0 on 6,7 (background,
#      CAIRN_OP_TIMES=1), check-reference qwen3 / llama with bf16 K/V under the tile order
#      (core 3), pp512 tile / f32 per type on cores 0,1.
#  PLAN=final (the figures): while the models are made, the tile tests (cores 0,1 and 3)
#   and a probe of the tile order's rows per unit (bench_attention at 8K under
#   CAIRN_ATTN_TILE_ROWS = 0 (the L2 budget) / 64 / 128, cores 4-6), whose fastest setting
#   the tile runs below use; then all at once on their own core pairs: pp8192 tile
#   Q4_K_M 4,5 / Q8_0 6,7, f32 order Q4_K_M 8,9 / Q8_0 10,11, llama.cpp Q4_K_M 12,13 /
#   Q8_0 14,15 (llama.cpp's first, with the longest timeout); meanwhile pp512 interleaved on
#   cores 0,1: tile, f32, llama.cpp, llama.cpp, f32, tile per type; bench_attention on core
#   2 (f32,tile at 2K and 8K, median of 5), check-reference on core 3.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-100}
PLAN=${PLAN:-check}
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
SB=; command -v stdbuf >/dev/null && SB="stdbuf -oL"
step() {
  local name=$1 max=$2; shift 2
  local l; l=$(left)
  if [ "$l" -le 5 ]; then el "SKIPPED (budget): $name"; return; fi
  [ "$max" -gt "$l" ] && max=$l
  el "$name"
  timeout "$max" $SB "$@"; echo "rc $?"
}
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
TILE="env CAIRN_ATTN_BF16TILE=1"
F32="env CAIRN_ATTN_BF16TILE=0 CAIRN_ATTN_BF16PAIR=0"
exec > >(tee "$O/log") 2>&1

el "cpu (PLAN=$PLAN BUDGET=$BUDGET)"
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; grep -m1 'cpu MHz' /proc/cpuinfo; nproc
grep -o -w -E 'amx_[a-z0-9]+|avx512_bf16|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
B=$D/bin
F=$D/fixtures/models
BA=/tmp/bench_attention.log
PIDS=()
RP=()
long8k() { # NAME CORES MAX CMD...
  local name=$1 cores=$2 max=$3; shift 3
  local l=$(( $(left) - 3 ))
  [ "$max" -gt "$l" ] && max=$l
  if [ "$max" -le 5 ]; then el "SKIPPED (budget): 8K $name"; return; fi
  ( echo "--- [$(( $(date +%s) - T0 )) s] start 8K: $name (cores $cores, timeout $max s)"; timeout $max taskset -c $cores "$@"
    echo "rc $? at $(( $(date +%s) - T0 )) s" ) >"/tmp/8k-$name.log" 2>&1 &
  PIDS+=($!)
}
models() {
  el models
  M=/tmp/amxm; mkdir -p $M
  tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz" ||
    env -u LD_LIBRARY_PATH python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall('/tmp')" "$D/llama.cpp-de3ff81-avx512.tar.xz"
  P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
  export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
  step synth 30 "$B/cairn" synth $M/hf --preset qwen3-0.6b >/dev/null
  step hf2gguf 40 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null
  step quantize-q8_0 30 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 16 >/dev/null 2>&1
  step quantize-q4_k_m 30 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 16 >/dev/null 2>&1
  rm -rf $M/hf $M/q06-bf16.gguf; ls -la $M
  NW=; $P/llama-bench --help 2>&1 | grep -q -- --no-warmup && NW=--no-warmup
}
BE="$B/bench_engine --threads 2 --runs 1 --only pp"

if [ "$PLAN" = check ]; then
  step test_attention_tile 40 taskset -c 0,1 "$B/test_attention_tile"
  step "bench_attention (core 2, background)" 1 true
  ( taskset -c 2 timeout $(( $(left) - 5 )) "$B/bench_attention" --ctx 2048,8192 --reps 3 --numerics f32,tile >$BA 2>&1; echo "rc $?" >>$BA ) &
  BAPID=$!
  step test_attention_tile_emulated 30 taskset -c 3 "$B/test_attention_tile_emulated"
  step test_backend 20 taskset -c 0,1 "$B/test_backend"
  step test_attn_tile_engine 40 taskset -c 0,1 "$B/test_attn_tile_engine"
  step "test_determinism (tile order)" 60 taskset -c 0,1 $TILE "$B/test_determinism"
  models
  long8k tile-Q4_K_M 4,5 999 env CAIRN_ATTN_BF16TILE=1 CAIRN_OP_TIMES=1 $BE --gguf $M/q06-Q4_K_M.gguf --long 8192
  long8k tile-Q8_0 6,7 999 env CAIRN_ATTN_BF16TILE=1 $BE --gguf $M/q06-Q8_0.gguf --long 8192
  for m in qwen3 llama; do
    step "check-reference $m (tile order, bf16 K/V)" 25 taskset -c 3 $TILE "$B/cairn" check-reference $F/$m --threads 1 --kv-dtype bf16 --max-diff 0.25 --min-margin 0.3
  done
  step "test_attention (f32 order)" 40 taskset -c 0,1 "$B/test_attention"
  for t in Q4_K_M Q8_0; do
    step "pp512 $t tile" 25 taskset -c 0,1 $TILE $BE --gguf $M/q06-$t.gguf --long 0
    step "pp512 $t f32" 25 taskset -c 0,1 $F32 $BE --gguf $M/q06-$t.gguf --long 0
  done
  el "waiting for bench_attention and the 8K prompts"
  wait $BAPID
else
  # Tests of this build on the real tiles (cores 0,1; the modelled tiles on core 3) and
  # a probe of the tile order's rows per unit at 8K (cores 4-6, one thread each) while
  # the models are made.
  ( for t in test_attention_tile test_attn_tile_engine; do
      echo "--- $t"; timeout 40 taskset -c 0,1 "$B/$t"; echo "rc $?"
    done
    echo "--- test_determinism (tile order)"; timeout 40 taskset -c 0,1 $TILE "$B/test_determinism"; echo "rc $?"
    echo "--- test_backend"; timeout 20 taskset -c 0,1 "$B/test_backend"; echo "rc $?" ) >/tmp/tests.log 2>&1 &
  TPID=$!
  ( timeout 40 taskset -c 3 "$B/test_attention_tile_emulated"; echo "rc $?" ) >/tmp/emu.log 2>&1 &
  EPID=$!
  i=4
  for r in 0 64 128; do
    ( timeout 40 taskset -c $i env CAIRN_ATTN_TILE_ROWS=$r "$B/bench_attention" --ctx 8192 --reps 3 --numerics tile ) >/tmp/rows-$r.log 2>&1 &
    RP+=($!); i=$((i + 1))
  done
  models
  wait "${RP[@]}"
  BEST=0; BT=999999
  for r in 0 64 128; do
    t=$(awk '/ctx +8192 tile/ {for (i = 1; i <= NF; i++) if ($i == "ms") {print $(i - 1); exit}}' /tmp/rows-$r.log)
    echo "rows probe: CAIRN_ATTN_TILE_ROWS=$r (0: the L2 budget) -> 8K chunk ${t:-?} ms"
    [ -n "$t" ] && awk -v a="$t" -v b="$BT" 'BEGIN {exit !(a < b)}' && { BEST=$r; BT=$t; }
  done
  echo "rows probe: chose CAIRN_ATTN_TILE_ROWS=$BEST"
  TILE="env CAIRN_ATTN_BF16TILE=1 CAIRN_ATTN_TILE_ROWS=$BEST"
  long8k llama-Q8_0 14,15 999 $P/llama-bench -m $M/q06-Q8_0.gguf -t 2 -p 8192 -n 0 -r 1 $NW
  long8k llama-Q4_K_M 12,13 999 $P/llama-bench -m $M/q06-Q4_K_M.gguf -t 2 -p 8192 -n 0 -r 1 $NW
  long8k tile-Q4_K_M 4,5 999 $TILE CAIRN_OP_TIMES=1 $BE --gguf $M/q06-Q4_K_M.gguf --long 8192
  long8k tile-Q8_0 6,7 999 $TILE $BE --gguf $M/q06-Q8_0.gguf --long 8192
  long8k f32-Q4_K_M 8,9 999 $F32 CAIRN_OP_TIMES=1 $BE --gguf $M/q06-Q4_K_M.gguf --long 8192
  long8k f32-Q8_0 10,11 999 $F32 $BE --gguf $M/q06-Q8_0.gguf --long 8192
  wait $TPID $EPID; echo "=== tests"; cat /tmp/tests.log; echo "=== test_attention_tile_emulated"; cat /tmp/emu.log
  ( for m in qwen3 llama; do
      echo "--- check-reference $m (tile order, bf16 K/V)"
      taskset -c 3 timeout 30 $TILE "$B/cairn" check-reference $F/$m --threads 1 --kv-dtype bf16 --max-diff 0.25 --min-margin 0.3
      echo "rc $?"
    done ) >/tmp/cref.log 2>&1 &
  ( taskset -c 2 timeout $(( $(left) - 5 )) env CAIRN_ATTN_TILE_ROWS=$BEST "$B/bench_attention" --ctx 2048,8192 --reps 5 --numerics f32,tile; echo "rc $?" ) >$BA 2>&1 &
  BAPID=$!
  for t in Q4_K_M Q8_0; do
    for who in T F L L F T; do
      case $who in
        T) step "pp512 $t tile" 25 taskset -c 0,1 $TILE $BE --gguf $M/q06-$t.gguf --long 0 ;;
        F) step "pp512 $t f32" 25 taskset -c 0,1 $F32 $BE --gguf $M/q06-$t.gguf --long 0 ;;
        L) step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 512 -n 0 -r 1 ;;
      esac
    done
  done
  el "waiting for bench_attention and the 8K prompts"
  wait $BAPID
  echo "=== check-reference"; cat /tmp/cref.log
  for r in 0 64 128; do echo "=== rows probe $r"; grep -E 'ctx|tile order' /tmp/rows-$r.log; done
fi
echo "=== bench_attention / check-reference"; cat $BA
[ ${#PIDS[@]} -gt 0 ] && wait "${PIDS[@]}"
for f in /tmp/8k-*.log; do [ -f "$f" ] && { echo "=== $f"; grep -v '^llama_model_loader\|^load\|^print_info\|^llama_\|^\.' "$f" | tail -40; }; done
el done
