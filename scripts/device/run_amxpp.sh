#!/usr/bin/env bash
# Device run "amxpp" (issue 12, session 6): AMX prefill at 2 threads on the device machine's
# Intel Xeon (its CPU, not its GPU): this branch (bench_engine) beside main's build
# (bench_engine.base) and llama.cpp de3ff81's AVX-512 build, pp512 and the 8K prompt, Q4_K_M
# and Q8_0. Staged by scripts/device/stage_amxpp.sh; run as `bash .devcarry/amx/run_amxpp.sh`
# (log under $OUT). Every step runs under a timeout and is skipped once BUDGET seconds have
# passed.
#  1. the CPU, AMX flags, the tile permission;
#  2. tests on the real tiles: test_quant_amx_emulated, test_quant_kernels,
#     test_quant_determinism (its quantize_every_family case fails: the hybrid families'
#     fixtures are not staged), test_kernels (the bf16 row rounding), test_backend;
#  3. the Qwen3-0.6B shape (cairn synth, hf2gguf.py to bf16, llama-quantize Q8_0, Q4_K_M);
#  4. the 8K prompt at 2 threads, all six at once on their own core pairs (the budget allows
#     no sequential 8K runs): branch Q4_K_M on cores 4,5, base 6,7, llama.cpp 8,9; Q8_0 on
#     10,11 / 12,13 / 14,15 (the branch with CAIRN_OP_TIMES=1: attention's share), in the
#     background while 5 and 6 run on cores 0-3;
#  5. pp512 at 2 threads on cores 0,1, interleaved: branch, base, llama.cpp, llama.cpp, base,
#     branch, for Q4_K_M then Q8_0 (the branch runs with CAIRN_OP_TIMES=1: per-op times),
#     then the branch with CAIRN_KERNELS=avx512 (the VNNI rows, no tiles);
#  6. bench_amx_parts on core 2 (one thread: the kernel with real tiles, without them, the
#     packing alone, the activation rounding, the VNNI rows), before and after 5;
#  then it waits for 4 until the budget ends.
# Six 8K runs at once slow every core: in session 6 a one-thread kernel on core 2 took 2.06x
# the CPU time while they ran (docs/PERFORMANCE.md). With SEQ8K=1 (needs BUDGET ~700: each
# 8K run is 100-180 s at 2 threads) they run one after another after 5 and 6 instead.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-285}
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
SB=; command -v stdbuf >/dev/null && SB="stdbuf -oL"
# step NAME MAX_S CMD...: runs CMD under a timeout of min(MAX_S, what is left), or skips it.
step() {
  local name=$1 max=$2; shift 2
  local l; l=$(left)
  if [ "$l" -le 5 ]; then el "SKIPPED (budget): $name"; return; fi
  [ "$max" -gt "$l" ] && max=$l
  el "$name"
  timeout "$max" $SB "$@"; echo "rc $?"
}
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
exec > >(tee "$O/log") 2>&1

el cpu
grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; nproc
grep -m1 -o -w -E 'amx_[a-z0-9]+|avx512_bf16|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
env -u LD_LIBRARY_PATH python3 -c "import ctypes, os; l = ctypes.CDLL(None, use_errno=True); r = l.syscall(158, 0x1023, 18); print('arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) =', r, os.strerror(ctypes.get_errno()) if r else 'granted')"
B=$D/bin

step test_quant_amx_emulated 30 "$B/test_quant_amx_emulated"
step test_quant_kernels 40 "$B/test_quant_kernels"
step test_quant_determinism 60 "$B/test_quant_determinism"
step test_kernels 20 "$B/test_kernels"
step test_backend 20 "$B/test_backend"

el models
M=/tmp/amxm; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz" ||
  env -u LD_LIBRARY_PATH python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall('/tmp')" "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
step synth 60 "$B/cairn" synth $M/hf --preset qwen3-0.6b
step hf2gguf 90 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16 >/dev/null
step quantize-q8_0 60 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 16 >/dev/null
step quantize-q4_k_m 60 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 16 >/dev/null
rm -rf $M/hf; ls -la $M
NW=; $P/llama-bench --help 2>&1 | grep -q -- --no-warmup && NW=--no-warmup

# The 8K prompt, six at once in the background (each its own log, printed at the end; the
# jobs are waited for by pid: a bare `wait` would also wait for the log's tee).
PIDS=()
long8k() { # NAME CORES CMD...
  local name=$1 cores=$2; shift 2
  local l=$(( $(left) - 3 ))
  if [ "$l" -le 5 ]; then el "SKIPPED (budget): 8K $name"; return; fi
  ( echo "--- [$(( $(date +%s) - T0 )) s] start 8K: $name (cores $cores)"; timeout $l taskset -c $cores "$@"
    echo "rc $? at $(( $(date +%s) - T0 )) s" ) >"/tmp/8k-$name.log" 2>&1 &
  PIDS+=($!)
  [ "${SEQ8K:-0}" = 1 ] && wait $! # one after another
}
run_8k_all() {
  el "8K prompts start"
  long8k branch-Q4_K_M 4,5 env CAIRN_OP_TIMES=1 "$B/bench_engine" --gguf $M/q06-Q4_K_M.gguf --threads 2 --runs 1 --long 8192 --only pp
  long8k base-Q4_K_M 6,7 "$B/bench_engine.base" --gguf $M/q06-Q4_K_M.gguf --threads 2 --runs 1 --long 8192 --only pp
  long8k llama-Q4_K_M 8,9 $P/llama-bench -m $M/q06-Q4_K_M.gguf -t 2 -p 8192 -n 0 -r 1 $NW
  long8k branch-Q8_0 10,11 env CAIRN_OP_TIMES=1 "$B/bench_engine" --gguf $M/q06-Q8_0.gguf --threads 2 --runs 1 --long 8192 --only pp
  long8k base-Q8_0 12,13 "$B/bench_engine.base" --gguf $M/q06-Q8_0.gguf --threads 2 --runs 1 --long 8192 --only pp
  long8k llama-Q8_0 14,15 $P/llama-bench -m $M/q06-Q8_0.gguf -t 2 -p 8192 -n 0 -r 1 $NW
}
[ "${SEQ8K:-0}" = 1 ] || run_8k_all
step "bench_amx_parts (core 2)" 25 taskset -c 2 "$B/bench_amx_parts" 5
for t in Q4_K_M Q8_0; do
  f=$M/q06-$t.gguf
  step "pp512 $t branch" 30 env CAIRN_OP_TIMES=1 taskset -c 0,1 "$B/bench_engine" --gguf $f --threads 2 --runs 1 --long 0 --only pp
  step "pp512 $t base" 30 taskset -c 0,1 "$B/bench_engine.base" --gguf $f --threads 2 --runs 1 --long 0 --only pp
  step "pp512 $t llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $f -t 2 -p 512 -n 0 -r 1
  step "pp512 $t llama.cpp" 40 taskset -c 0,1 $P/llama-bench -m $f -t 2 -p 512 -n 0 -r 1
  step "pp512 $t base" 30 taskset -c 0,1 "$B/bench_engine.base" --gguf $f --threads 2 --runs 1 --long 0 --only pp
  step "pp512 $t branch" 30 env CAIRN_OP_TIMES=1 taskset -c 0,1 "$B/bench_engine" --gguf $f --threads 2 --runs 1 --long 0 --only pp
  step "pp512 $t branch, CAIRN_KERNELS=avx512" 30 env CAIRN_KERNELS=avx512 taskset -c 0,1 "$B/bench_engine" --gguf $f --threads 2 --runs 1 --long 0 --only pp
done
step "bench_amx_parts (core 2)" 25 taskset -c 2 "$B/bench_amx_parts" 5

[ "${SEQ8K:-0}" = 1 ] && run_8k_all
el "waiting for the 8K prompts"
[ ${#PIDS[@]} -gt 0 ] && wait "${PIDS[@]}"
for f in /tmp/8k-*.log; do [ -f "$f" ] && { echo "=== $f"; cat "$f"; }; done
el done
