# common.sh — sourced by the session-9 device runs (scripts/device/run_*9*.sh, run_k9.sh,
# run_pp9.sh), copied beside them by their stage scripts. The caller sets D (its folder),
# BUDGET (seconds) and T0 (its start, `date +%s`) first. Provides:
#   el MSG             a log line stamped with the seconds since T0;
#   left               the seconds of BUDGET left;
#   step NAME MAX CMD  CMD under a timeout of MAX (or what is left of BUDGET), skipped once
#                      5 s or less are left; prints "rc N" (stdout line-buffered if stdbuf exists);
#   models_q06 DIR [CORES]
#                      the Qwen3-0.6B-shape GGUFs DIR/q06-Q8_0.gguf and DIR/q06-Q4_K_M.gguf
#                      (cairn synth --preset qwen3-0.6b, hf2gguf.py bf16, llama-quantize),
#                      under taskset -c CORES when given; extracts the llama.cpp peer
#                      ($D/llama.cpp-*.tar.xz) into /tmp and sets P to its binaries' folder
#                      (added to LD_LIBRARY_PATH);
#   peer_ready         P = the llama.cpp peer's binaries' folder (extracted from
#                      $D/llama.cpp-*.tar.xz into /tmp unless already there), added to
#                      LD_LIBRARY_PATH;
#   run_begin          the session-12 runs' preamble (run_pp12*.sh): O (the tool's $OUT, else
#                      /tmp/out), BUDGET's default 150 and T0, the staged libraries and
#                      fixtures, the attention knobs unset, all output teed to $O/log, and
#                      the CPU named (model name, model, count). Sets BUDGET and T0 itself.
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
models_q06() {
  local dir=$1 ts=
  [ -n "${2:-}" ] && ts="taskset -c $2"
  mkdir -p "$dir"
  tar -C /tmp -xJf "$D"/llama.cpp-*.tar.xz
  P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
  export LD_LIBRARY_PATH="$P:${LD_LIBRARY_PATH:-}"
  step synth 30 $ts "$D/bin/cairn" synth "$dir/hf" --preset qwen3-0.6b >/dev/null
  step hf2gguf 40 $ts env -u LD_LIBRARY_PATH python3 "$D/hf2gguf.py" "$dir/hf" -o "$dir/q06-bf16.gguf" --type bf16 >/dev/null
  step quantize-q8_0 30 $ts $P/llama-quantize "$dir/q06-bf16.gguf" "$dir/q06-Q8_0.gguf" Q8_0 12 >/dev/null 2>&1
  step quantize-q4_k_m 30 $ts $P/llama-quantize "$dir/q06-bf16.gguf" "$dir/q06-Q4_K_M.gguf" Q4_K_M 12 >/dev/null 2>&1
  rm -rf "$dir/hf" "$dir/q06-bf16.gguf"
}
run_begin() {
  O=${OUT:-/tmp/out}; mkdir -p "$O"
  BUDGET=${BUDGET:-150}
  T0=$(date +%s)
  export LD_LIBRARY_PATH="$D/lib:${LD_LIBRARY_PATH:-}" CAIRN_FIXTURES="$D/fixtures"
  unset CAIRN_ATTN_BF16TILE CAIRN_ATTN_BF16PAIR
  exec > >(tee "$O/log") 2>&1
  el "cpu (BUDGET=$BUDGET)"
  grep -m1 'model name' /proc/cpuinfo; grep -m1 '^model\s' /proc/cpuinfo; nproc
}
peer_ready() {
  [ -e /tmp/llama.cpp/llama-bench ] || [ -e /tmp/llama.cpp/bin/llama-bench ] || tar -C /tmp -xJf "$D"/llama.cpp-*.tar.xz
  P=/tmp/llama.cpp; [ -d $P/bin ] && P=$P/bin
  export LD_LIBRARY_PATH="$P:${LD_LIBRARY_PATH:-}"
}
