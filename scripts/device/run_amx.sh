#!/usr/bin/env bash
# Device run "amx" (issue 12): the AMX kernels on the device machine's Intel Xeon (its CPU,
# not its GPU). Staged by scripts/device/stage_amx.sh into an ignored folder of the checkout
# the device tool carries; run as `bash .devcarry/amx/run_amx.sh` (output under $OUT).
#  1. the CPU: model, AMX flags, whether arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) is granted;
#  2. the AMX tests on the real tiles: test_quant_amx_emulated (the model, as anywhere),
#     test_quant_kernels (amx = scalar bit for bit, int8 and bf16; threads, batching) and
#     test_quant_determinism (every path and implementation, the q256 GGUF fixtures);
#  3. the Qwen3-0.6B shape (cairn synth, the peer's hf2gguf.py to bf16, llama-quantize to
#     Q8_0 and Q4_K_M), then bench_engine (kernels amx, and CAIRN_KERNELS=avx512) beside
#     llama-bench (llama.cpp de3ff81, AVX-512 build, no AMX): pp512 / tg128 at 16 threads, the
#     8K prompt at 16 threads, pp512 / tg128 at 2 (taskset -c 0,1). Steps are skipped once
#     BUDGET seconds have passed, so the run ends inside the device tool's limit.
D=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/out}; mkdir -p "$O"
BUDGET=${BUDGET:-270}
T0=$(date +%s)
el() { echo "--- [$(( $(date +%s) - T0 )) s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# step NAME MAX_S CMD...: runs CMD under a timeout of min(MAX_S, what is left), or skips it.
step() {
  local name=$1 max=$2; shift 2
  local l; l=$(left)
  if [ "$l" -le 5 ]; then el "SKIPPED (budget): $name"; return; fi
  [ "$max" -gt "$l" ] && max=$l
  el "$name"
  timeout "$max" "$@"; echo "rc $?"
}
export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
exec > >(tee "$O/log") 2>&1

el cpu
grep -m1 'model name' /proc/cpuinfo; grep -m1 -E '^(cpu family|model)\s' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo
nproc; grep -c ^processor /proc/cpuinfo
grep -m1 -o -w -E 'amx_(bf16|int8|tile|fp16)|avx512_bf16|avx512_vnni|avx512_fp16' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
grep -m1 -o -w -E 'amx_[a-z0-9]+' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
uname -r; free -g | head -2
env -u LD_LIBRARY_PATH python3 -c "import ctypes, os; l = ctypes.CDLL(None, use_errno=True); r = l.syscall(158, 0x1023, 18); print('arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) =', r, os.strerror(ctypes.get_errno()) if r else 'granted')"

step test_quant_amx_emulated 60 "$D/bin/test_quant_amx_emulated"
step test_quant_kernels 90 "$D/bin/test_quant_kernels"
step test_quant_determinism 120 "$D/bin/test_quant_determinism"

el models
M=/tmp/amxm; mkdir -p $M
tar -C /tmp -xJf "$D/llama.cpp-de3ff81-avx512.tar.xz" ||
  env -u LD_LIBRARY_PATH python3 -c "import tarfile, sys; tarfile.open(sys.argv[1]).extractall('/tmp')" "$D/llama.cpp-de3ff81-avx512.tar.xz"
P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
export LD_LIBRARY_PATH="$P:$LD_LIBRARY_PATH"
step synth 60 "$D/bin/cairn" synth $M/hf --preset qwen3-0.6b
step hf2gguf 90 env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" $M/hf -o $M/q06-bf16.gguf --type bf16
step quantize-q8_0 60 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q8_0.gguf Q8_0 16
step quantize-q4_k_m 60 $P/llama-quantize $M/q06-bf16.gguf $M/q06-Q4_K_M.gguf Q4_K_M 16
rm -rf $M/hf; ls -la $M
NW=; $P/llama-bench --help 2>&1 | grep -q -- --no-warmup && NW=--no-warmup

# cairn TYPE THREADS ARGS...: bench_engine on q06-TYPE.gguf (bf16: in BF16 math).
cairn() {
  local t=$1 th=$2; shift 2
  local mb=; [ "$t" = bf16 ] && mb=--math-bf16
  local ts=; [ "$th" = 2 ] && ts="taskset -c 0,1"
  step "cairn $t $th threads ${CAIRN_KERNELS:-amx} $*" 60 $ts "$D/bin/bench_engine" --gguf $M/q06-$t.gguf --threads $th $mb "$@"
}
llama() {
  local t=$1 th=$2; shift 2
  local ts=; [ "$th" = 2 ] && ts="taskset -c 0,1"
  step "llama.cpp $t $th threads $*" 90 $ts $P/llama-bench -m $M/q06-$t.gguf -t $th "$@"
}
bench_pp_tg() {
  for t in Q8_0 Q4_K_M bf16; do
    cairn $t $1 --runs 1 --long 0
    CAIRN_KERNELS=avx512 cairn $t $1 --runs 1 --long 0 --only pp
    llama $t $1 -p 512 -n 128 -r 1
  done
}
bench_pp_tg 16
for t in Q4_K_M Q8_0 bf16; do
  cairn $t 16 --runs 1 --long 8192 --only pp
  llama $t 16 -p 8192 -n 0 -r 1 $NW
done
bench_pp_tg 2
CAIRN_KERNELS=avx512 cairn bf16 16 --runs 1 --long 8192 --only pp
el done
