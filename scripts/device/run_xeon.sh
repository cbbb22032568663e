#!/usr/bin/env bash
# Device run "xeon" (issue 12, session 5): decode at 2 and 16 threads, the thread pool's
# per-run cost, and AMX prefill on the device machine's Intel Xeon (its CPU, not its GPU),
# this branch beside the baseline build (bench_engine.base) and llama.cpp in one run.
# Staged by scripts/device/stage_xeon.sh; run as `bash .devcarry/xeon/run_xeon.sh` (log
# under $OUT). Every step runs under a timeout and is skipped once BUDGET seconds have
# passed; each step prints the host's steal time it saw (/proc/stat, jiffies of all CPUs),
# since a VM whose vCPUs lose their core shows it there and not in its own CPU time.
#  1. the CPU, AMX flags, the tile permission;
#  2. tests on the real tiles and 16 cores: test_thread_pool, test_quant_kernels,
#     test_quant_determinism (the hybrid families' fixtures are not staged: its
#     quantize_every_family case fails on them);
#  3. the pool's empty parallel-for at 2 and 16 threads (bench_kernels), the base's at 1, 2;
#  4. the Qwen3-0.6B shape (cairn synth, hf2gguf.py to bf16, llama-quantize Q8_0, Q4_K_M);
#  5. decode tg128 at 2 threads (taskset -c 0,1): branch amx, base amx, branch avx512,
#     llama.cpp; the quantized decode kernels beside a raw read, prefetch distance 0 / 1 / 2
#     tiles (BENCH_QUANT_ONLY bench_kernels, 2 threads);
#  6. pp512 + tg128 at 16 threads: branch amx, base amx, branch avx512 (pp), llama.cpp;
#  7. pp512 at 2 threads: branch amx, llama.cpp;
#  8. the 8K prompt at 16 threads (Q4_K_M, then Q8_0): branch amx, llama.cpp;
#  and, after the tests, the AMX-BF16 characterization (bench_amx_bf16_probe).
# PLAN=decode (session 6) skips the tests and 5-8: decode tg128 at 2 threads (taskset -c 0,1),
# branch / base / llama.cpp / llama.cpp / base / branch per type; the branch's decode profiled
# (perf record where perf exists, else the LD_PRELOAD sampler, lib/libxeon_sampler.so:
# samples to $OUT/prof_TYPE.txt, symbolized afterwards by xeon_symbolize.py with bin/); the
# row kernels from L2 (BENCH_QUANT_L2, one thread on core 0), this branch and
# bench_kernels.before alternately.
# PLAN=pf (session 6, run 2) skips the tests too: the quantized decode kernels over the vocab
# head at 2 threads (BENCH_QUANT_ONLY, 3 reps) with a prefetch every 1, 2, 4, 8 lines
# (CAIRN_QMM_PF_STRIDE) in the order 1 2 4 8 8 4 2 1, then Q4_K_M tg128 at 2 threads with
# strides 1, 4, 4, 1 (only the Q4_K_M file is made).
# PLAN=order (next session): tg128 at 2 threads of both files, the row kernels' tile order
# A/B in one binary: default (linear k-quants), CAIRN_QMM_ORDER=0 (session 5's column order),
# llama.cpp, llama.cpp, column, default; with PP=1 then pp512 at 2 threads (this build, the
# base build, llama.cpp, this build per type); then the vocab head kernels in both orders.
# PLAN=xdec2 (session 7, branch xdec2): the vCPU topology (lscpu -e, thread siblings); tg128
# at 2 threads, this build (as staged for the run: column order on Intel), the base build
# (main: linear k-quants), llama.cpp, llama.cpp, base, this build per type; the 28 layers' matmuls
# of the 0.6B shape (BENCH_QUANT_LAYERS bench_kernels, 2 threads) with the prefetch knobs
# (default, CAIRN_QMM_ORDER=1, =1 with CAIRN_QMM_PF_TILES=0, CAIRN_QMM_PF_FIRST=1,
# CAIRN_QMM_PF_TILES=2, CAIRN_QMM_TASKS=8 tasks per thread, default); Q4_K_M tg128 with PF_FIRST=1 and with ORDER=1 PF_TILES=0;
# the sampler's profile of Q4_K_M; and, if vCPUs 0 and 1 are SMT siblings, tg128 of this
# build and llama.cpp on cores 0,2.
# PLAN=repeat (run 2) skips the tests and 5-8 and repeats the decode figures instead, in
# interleaved order (see below), with 2 threads on cores 0,1 and on cores 2,3.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-280}
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
SB=; command -v stdbuf >/dev/null && SB="stdbuf -oL" # a step stopped by its timeout keeps its output
steal() { awk '/^cpu /{print $9}' /proc/stat; }
# step NAME MAX_S CMD...: runs CMD under a timeout of min(MAX_S, what is left), or skips it.
step() {
  local name=$1 max=$2; shift 2
  local l; l=$(left)
  if [ "$l" -le 5 ]; then el "SKIPPED (budget): $name"; return; fi
  [ "$max" -gt "$l" ] && max=$l
  el "$name"
  local s0; s0=$(steal)
  timeout "$max" $SB "$@"; local rc=$?
  echo "rc $rc, steal $(( $(steal) - s0 )) jiffies"
}
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
exec > >(tee "$O/log") 2>&1

el cpu
grep -m1 'model name' /proc/cpuinfo; grep -m1 -E '^(cpu family|model)\s' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo
nproc; lscpu 2>/dev/null | grep -E 'Thread|Core|Socket|NUMA|L2|L3|MHz' | head -12
if [ "${PLAN:-}" = xdec2 ]; then
  lscpu -e 2>/dev/null | head -20
  for c in 0 1 2; do echo "cpu$c siblings $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null) core_id $(cat /sys/devices/system/cpu/cpu$c/topology/core_id 2>/dev/null)"; done
fi
grep -m1 -o -w -E 'amx_[a-z0-9]+|avx512_bf16|avx512_vnni|avx512_fp16' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
uname -r; free -g | head -2; head -1 /proc/stat
env -u LD_LIBRARY_PATH python3 -c "import ctypes, os; l = ctypes.CDLL(None, use_errno=True); r = l.syscall(158, 0x1023, 18); print('arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) =', r, os.strerror(ctypes.get_errno()) if r else 'granted')"
B=$D/bin

PLAN=${PLAN:-full}
if [ "$PLAN" = full ]; then
step test_thread_pool 30 "$B/test_thread_pool"
step test_quant_kernels 60 "$B/test_quant_kernels"
step test_quant_determinism 90 "$B/test_quant_determinism"
[ -x "$B/bench_amx_bf16_probe" ] && step "amx bf16 probe" 20 "$B/bench_amx_bf16_probe"
step "pool overhead, branch" 40 env BENCH_POOL_ONLY=1 BENCH_POOL_THREADS=2,16 "$B/bench_kernels"
step "pool overhead, base (1, 2 threads; then stopped)" 8 env BENCH_QUANT_ONLY=1 "$B/bench_kernels.base" 1
fi

if [ "$PLAN" = pf ]; then
  for st in 1 2 4 8 8 4 2 1; do
    step "quantized kernels, 2 threads, prefetch stride $st line(s)" 15 env CAIRN_QMM_PF_STRIDE=$st BENCH_QUANT_ONLY=1 BENCH_POOL_THREADS=2 taskset -c 0,1 "$B/bench_kernels" 3
  done
fi

el models
M=/tmp/amxm; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz" ||
  env -u LD_LIBRARY_PATH python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall('/tmp')" "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
step synth 60 "$B/cairn" synth $M/hf --preset qwen3-0.6b
step hf2gguf 90 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16
[ "$PLAN" = pf ] || step quantize-q8_0 60 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 16 >/dev/null
step quantize-q4_k_m 60 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 16 >/dev/null
rm -rf $M/hf; ls -la $M
NW=; $P/llama-bench --help 2>&1 | grep -q -- --no-warmup && NW=--no-warmup

# cairn BIN TYPE THREADS ARGS...: bench_engine (bench_engine or bench_engine.base) on q06-TYPE.gguf.
cairn() {
  local bin=$1 t=$2 th=$3; shift 3
  local ts=; [ "$th" = 2 ] && ts="taskset -c 0,1"
  [ "$th" = 2 ] && [ -n "${CORES:-}" ] && ts="taskset -c $CORES"
  step "$bin $t $th threads ${CAIRN_KERNELS:-amx}${CAIRN_QMM_PF_STRIDE:+ pf stride $CAIRN_QMM_PF_STRIDE}${CAIRN_QMM_ORDER:+ order $CAIRN_QMM_ORDER}${CAIRN_QMM_PF_TILES:+ pf tiles $CAIRN_QMM_PF_TILES}${CAIRN_QMM_PF_FIRST:+ pf first $CAIRN_QMM_PF_FIRST}${CORES:+ cores $CORES} $*" 60 $ts "$B/$bin" --gguf $M/q06-$t.gguf --threads $th "$@"
}
llama() {
  local t=$1 th=$2; shift 2
  local ts=; [ "$th" = 2 ] && ts="taskset -c 0,1"
  [ "$th" = 2 ] && [ -n "${CORES:-}" ] && ts="taskset -c $CORES"
  step "llama.cpp $t $th threads${CORES:+ cores $CORES} $*" 90 $ts $P/llama-bench -m $M/q06-$t.gguf -t $th "$@"
}

if [ "$PLAN" = pf ]; then
  for st in 1 4 4 1; do
    CAIRN_QMM_PF_STRIDE=$st cairn bench_engine Q4_K_M 2 --runs 1 --long 0 --only tg
  done
  el done
  exit 0
fi

if [ "$PLAN" = order ]; then
  for t in Q4_K_M Q8_0; do
    cairn bench_engine $t 2 --runs 1 --long 0 --only tg
    CAIRN_QMM_ORDER=0 cairn bench_engine $t 2 --runs 1 --long 0 --only tg
    llama $t 2 -p 0 -n 128 -r 1
    llama $t 2 -p 0 -n 128 -r 1
    CAIRN_QMM_ORDER=0 cairn bench_engine $t 2 --runs 1 --long 0 --only tg
    cairn bench_engine $t 2 --runs 1 --long 0 --only tg
  done
  if [ "${PP:-0}" = 1 ]; then # pp512 at 2 threads: this build, the base build, llama.cpp
    for t in Q4_K_M Q8_0; do
      cairn bench_engine $t 2 --runs 1 --long 0 --only pp
      cairn bench_engine.base $t 2 --runs 1 --long 0 --only pp
      llama $t 2 -p 512 -n 0 -r 1
      cairn bench_engine $t 2 --runs 1 --long 0 --only pp
    done
  fi
  for o in 1 0 0 1; do
    step "quantized kernels, 2 threads, order $o" 15 env CAIRN_QMM_ORDER=$o BENCH_QUANT_ONLY=1 BENCH_POOL_THREADS=2 taskset -c 0,1 "$B/bench_kernels" 3
  done
  el done
  exit 0
fi

if [ "$PLAN" = xdec2 ]; then
  for t in Q4_K_M Q8_0; do
    cairn bench_engine $t 2 --runs 1 --long 0 --only tg
    cairn bench_engine.base $t 2 --runs 1 --long 0 --only tg
    llama $t 2 -p 0 -n 128 -r 1
    llama $t 2 -p 0 -n 128 -r 1
    cairn bench_engine.base $t 2 --runs 1 --long 0 --only tg
    cairn bench_engine $t 2 --runs 1 --long 0 --only tg
  done
  for kv in "" "CAIRN_QMM_ORDER=1" "CAIRN_QMM_ORDER=1 CAIRN_QMM_PF_TILES=0" "CAIRN_QMM_PF_FIRST=1" "CAIRN_QMM_PF_TILES=2" "CAIRN_QMM_TASKS=8" ""; do
    step "28 layers' matmuls, 2 threads, ${kv:-default}" 12 env $kv BENCH_QUANT_LAYERS=1 BENCH_POOL_THREADS=2 taskset -c 0,1 "$B/bench_kernels" 3
  done
  CAIRN_QMM_PF_FIRST=1 cairn bench_engine Q4_K_M 2 --runs 1 --long 0 --only tg
  CAIRN_QMM_ORDER=1 CAIRN_QMM_PF_TILES=0 cairn bench_engine Q4_K_M 2 --runs 1 --long 0 --only tg
  step "profile (sampler) bench_engine Q4_K_M 2 threads" 25 env LD_PRELOAD="$D/lib/libxeon_sampler.so" \
    XEON_SAMPLER_OUT="$O/prof_Q4_K_M.txt" XEON_SAMPLER_US=500 XEON_SAMPLER_SKIP_MS=4000 \
    taskset -c 0,1 "$B/bench_engine" --gguf $M/q06-Q4_K_M.gguf --threads 2 --runs 2 --long 0 --only tg
  head -1 "$O/prof_Q4_K_M.txt"
  if grep -qE '^(0[,-]1|0,1)$' /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null; then
    for t in Q4_K_M; do
      CORES=0,2 cairn bench_engine $t 2 --runs 1 --long 0 --only tg
      CORES=0,2 llama $t 2 -p 0 -n 128 -r 1
    done
  fi
  el done
  exit 0
fi

if [ "$PLAN" = decode ]; then
  command -v perf && perf --version
  for t in Q4_K_M Q8_0; do
    cairn bench_engine $t 2 --runs 1 --long 0 --only tg
    cairn bench_engine.base $t 2 --runs 1 --long 0 --only tg
    llama $t 2 -p 0 -n 128 -r 1
    llama $t 2 -p 0 -n 128 -r 1
    cairn bench_engine.base $t 2 --runs 1 --long 0 --only tg
    cairn bench_engine $t 2 --runs 1 --long 0 --only tg
  done
  for k in 1 2; do
    step "row kernels in L2, branch" 15 env BENCH_QUANT_L2=1 BENCH_POOL_THREADS=1 taskset -c 0 "$B/bench_kernels"
    [ -x "$B/bench_kernels.before" ] && step "row kernels in L2, before" 15 env BENCH_QUANT_L2=1 BENCH_POOL_THREADS=1 taskset -c 0 "$B/bench_kernels.before"
  done
  for t in Q4_K_M Q8_0; do
    # The 512-token warm-up prefill and the 16-token prompt take ~3 s of CPU: samples from 4 s on.
    if command -v perf >/dev/null && perf record -e cpu-clock -o /tmp/perf.probe true >/dev/null 2>&1; then
      step "profile (perf) bench_engine $t 2 threads" 40 perf record -e cpu-clock -F 2000 -D 3000 -o /tmp/perf_$t.data \
        taskset -c 0,1 "$B/bench_engine" --gguf $M/q06-$t.gguf --threads 2 --runs 2 --long 0 --only tg
      perf report -i /tmp/perf_$t.data --no-children --sort sym --stdio 2>/dev/null | grep -v '^#' | grep '%' | head -45 > "$O/prof_$t.txt"
      head -45 "$O/prof_$t.txt"
    else
      step "profile (sampler) bench_engine $t 2 threads" 40 env LD_PRELOAD="$D/lib/libxeon_sampler.so" \
        XEON_SAMPLER_OUT="$O/prof_$t.txt" XEON_SAMPLER_US=500 XEON_SAMPLER_SKIP_MS=4000 \
        taskset -c 0,1 "$B/bench_engine" --gguf $M/q06-$t.gguf --threads 2 --runs 2 --long 0 --only tg
      head -1 "$O/prof_$t.txt"
    fi
  done
  el done
  exit 0
fi

if [ "$PLAN" = repeat ]; then
  # Repeats of run 1's decode figures in interleaved order (branch, base, llama.cpp,
  # llama.cpp, base, branch) at 2 threads on cores 0,1; then cores 2,3 (TS2); then 16
  # threads, branch / base / base / branch.
  for t in Q8_0 Q4_K_M; do
    cairn bench_engine $t 2 --runs 1 --long 0 --only tg
    cairn bench_engine.base $t 2 --runs 1 --long 0 --only tg
    llama $t 2 -p 0 -n 128 -r 1
    llama $t 2 -p 0 -n 128 -r 1
    cairn bench_engine.base $t 2 --runs 1 --long 0 --only tg
    cairn bench_engine $t 2 --runs 1 --long 0 --only tg
  done
  for t in Q4_K_M Q8_0; do
    step "bench_engine $t 2 threads on cores 2,3" 60 taskset -c 2,3 "$B/bench_engine" --gguf $M/q06-$t.gguf --threads 2 --runs 1 --long 0 --only tg
    step "llama.cpp $t 2 threads on cores 2,3" 60 taskset -c 2,3 $P/llama-bench -m $M/q06-$t.gguf -t 2 -p 0 -n 128 -r 1
  done
  for t in Q8_0 Q4_K_M; do
    cairn bench_engine $t 16 --runs 1 --long 0 --only tg
    cairn bench_engine.base $t 16 --runs 1 --long 0 --only tg
    cairn bench_engine.base $t 16 --runs 1 --long 0 --only tg
    cairn bench_engine $t 16 --runs 1 --long 0 --only tg
  done
  el done
  exit 0
fi

# 5. decode at 2 threads
for t in Q8_0 Q4_K_M; do
  cairn bench_engine $t 2 --runs 1 --long 0 --only tg
  cairn bench_engine.base $t 2 --runs 1 --long 0 --only tg
  llama $t 2 -p 0 -n 128 -r 1
  CAIRN_KERNELS=avx512 cairn bench_engine $t 2 --runs 1 --long 0 --only tg
done
for pf in 1 2 0; do
  step "quantized kernels, 2 threads, prefetch $pf tile(s)" 40 env CAIRN_QMM_PF_TILES=$pf BENCH_QUANT_ONLY=1 BENCH_POOL_THREADS=2 taskset -c 0,1 "$B/bench_kernels" 5
done
# 6. 16 threads
for t in Q4_K_M Q8_0; do
  cairn bench_engine $t 16 --runs 1 --long 0
  cairn bench_engine.base $t 16 --runs 1 --long 0
  CAIRN_KERNELS=avx512 cairn bench_engine $t 16 --runs 1 --long 0 --only pp
  llama $t 16 -p 512 -n 128 -r 1
done
# 7. prefill at 2 threads
for t in Q8_0 Q4_K_M; do
  cairn bench_engine $t 2 --runs 1 --long 0 --only pp
  llama $t 2 -p 512 -n 0 -r 1
done
# 8. the 8K prompt at 16 threads
for t in Q4_K_M Q8_0; do
  cairn bench_engine $t 16 --runs 1 --long 8192 --only pp
  llama $t 16 -p 8192 -n 0 -r 1 $NW
done
el done
