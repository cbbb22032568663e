#!/usr/bin/env bash
# Device run "amxattn" (issue 12, session 7): the pair order of bf16 K/V attention on the
# device machine's Intel Xeon (its CPU): AMX-BF16 tiles of one pair per step against their
# AVX-512 emulation, and prefill at 2 threads. Staged by scripts/device/stage_amxattn.sh; run
# as `bash .devcarry/amx/run_amxattn.sh` (log under $OUT). Every step runs under a timeout and
# is skipped once BUDGET seconds have passed.
#  1. the CPU, AMX flags, the tile permission;
#  2. tests: test_attention_amx (real tiles = emulation, bit for bit), the emulated-tile
#     test, test_attention (the f32 order, then the pair order), test_attn_pair_engine,
#     test_determinism (CAIRN_ATTN_BF16PAIR=auto, exported for every step: the pair order
#     with tiles where they passed);
#  3. bench_attention on core 2 in the background (512-query chunks at 2K and 8K context,
#     f32 / pair on the tiles / pair emulated, interleaved in one process, thread CPU time);
#  4. the Qwen3-0.6B shape (cairn synth, hf2gguf.py to bf16, llama-quantize Q8_0, Q4_K_M) and
#     check-reference on the dense fixtures under auto (the pair order, tiles);
#  5. the 8K prompt at 2 threads, all at once on their own core pairs: pair order (auto)
#     Q4_K_M 4,5, f32 order (CAIRN_ATTN_BF16PAIR=0: main's attention) 6,7, Q8_0 8,9 / 10,11,
#     llama.cpp Q4_K_M 12,13 and Q8_0 14,15 (these may not finish within the budget);
#  6. pp512 at 2 threads on cores 0,1: pair, f32, llama.cpp, llama.cpp, f32, pair per type;
#  then it waits for 5 until the budget ends.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-175}
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
# The pair order where the tiles pass their check (off by default until verified there).
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures" CAIRN_ATTN_BF16PAIR=auto
exec > >(tee "$O/log") 2>&1

el cpu
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; nproc
grep -o -w -E 'amx_[a-z0-9]+|avx512_bf16|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
B=$D/bin
F=$D/fixtures/models

step test_attention_amx 30 "$B/test_attention_amx"
step test_attention_amx_emulated 20 "$B/test_attention_amx_emulated"
step "bench_attention (core 2, background)" 1 true
BA=/tmp/bench_attention.log
( taskset -c 2 timeout $(( $(left) - 5 )) "$B/bench_attention" --ctx 2048,8192 --reps 3 --numerics f32,pair,emu >$BA 2>&1; echo "rc $?" >>$BA ) &
BAPID=$!
step test_attention 40 taskset -c 0,1 "$B/test_attention"
step test_attn_pair_engine 30 taskset -c 0,1 "$B/test_attn_pair_engine"
step test_determinism 40 taskset -c 0,1 "$B/test_determinism"

el models
M=/tmp/amxm; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz" ||
  env -u LD_LIBRARY_PATH python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall('/tmp')" "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
step synth 30 "$B/cairn" synth $M/hf --preset qwen3-0.6b
step hf2gguf 40 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null
step quantize-q8_0 30 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 16 >/dev/null
step quantize-q4_k_m 30 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 16 >/dev/null
rm -rf $M/hf $M/q06-bf16.gguf; ls -la $M
NW=; $P/llama-bench --help 2>&1 | grep -q -- --no-warmup && NW=--no-warmup

PIDS=()
long8k() { # NAME CORES CMD...
  local name=$1 cores=$2; shift 2
  local l=$(( $(left) - 3 ))
  if [ "$l" -le 5 ]; then el "SKIPPED (budget): 8K $name"; return; fi
  ( echo "--- [$(( $(date +%s) - T0 )) s] start 8K: $name (cores $cores)"; timeout $l taskset -c $cores "$@"
    echo "rc $? at $(( $(date +%s) - T0 )) s" ) >"/tmp/8k-$name.log" 2>&1 &
  PIDS+=($!)
}
el "8K prompts start"
long8k pair-Q4_K_M 4,5 env CAIRN_OP_TIMES=1 "$B/bench_engine" --gguf $M/q06-Q4_K_M.gguf --threads 2 --runs 1 --long 8192 --only pp
long8k f32-Q4_K_M 6,7 env CAIRN_ATTN_BF16PAIR=0 "$B/bench_engine" --gguf $M/q06-Q4_K_M.gguf --threads 2 --runs 1 --long 8192 --only pp
long8k pair-Q8_0 8,9 "$B/bench_engine" --gguf $M/q06-Q8_0.gguf --threads 2 --runs 1 --long 8192 --only pp
long8k f32-Q8_0 10,11 env CAIRN_ATTN_BF16PAIR=0 "$B/bench_engine" --gguf $M/q06-Q8_0.gguf --threads 2 --runs 1 --long 8192 --only pp
long8k llama-Q4_K_M 12,13 $P/llama-bench -m $M/q06-Q4_K_M.gguf -t 2 -p 8192 -n 0 -r 1 $NW
long8k llama-Q8_0 14,15 $P/llama-bench -m $M/q06-Q8_0.gguf -t 2 -p 8192 -n 0 -r 1 $NW

for m in qwen3 llama; do
  step "check-reference $m (default numerics, bf16 K/V)" 20 taskset -c 3 "$B/cairn" check-reference $F/$m --threads 1 --kv-dtype bf16 --max-diff 0.25 --min-margin 0.3
done
for t in Q4_K_M Q8_0; do
  f=$M/q06-$t.gguf
  step "pp512 $t pair" 25 taskset -c 0,1 "$B/bench_engine" --gguf $f --threads 2 --runs 1 --long 0 --only pp
  step "pp512 $t f32" 25 env CAIRN_ATTN_BF16PAIR=0 taskset -c 0,1 "$B/bench_engine" --gguf $f --threads 2 --runs 1 --long 0 --only pp
  step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $f -t 2 -p 512 -n 0 -r 1
  step "pp512 $t llama.cpp" 30 taskset -c 0,1 $P/llama-bench -m $f -t 2 -p 512 -n 0 -r 1
  step "pp512 $t f32" 25 env CAIRN_ATTN_BF16PAIR=0 taskset -c 0,1 "$B/bench_engine" --gguf $f --threads 2 --runs 1 --long 0 --only pp
  step "pp512 $t pair" 25 taskset -c 0,1 "$B/bench_engine" --gguf $f --threads 2 --runs 1 --long 0 --only pp
done

el "waiting for bench_attention and the 8K prompts"
wait $BAPID; echo "=== bench_attention"; cat $BA
[ ${#PIDS[@]} -gt 0 ] && wait "${PIDS[@]}"
for f in /tmp/8k-*.log; do [ -f "$f" ] && { echo "=== $f"; cat "$f"; }; done
el done
