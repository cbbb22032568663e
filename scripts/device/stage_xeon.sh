#!/usr/bin/env bash
# Stages device run "xeon" (scripts/device/run_xeon.sh, session 5, issue 12) into DEST: what
# stage_amx.sh stages (this build's test and bench binaries, cairn, their libraries, the
# llama.cpp peer and hf2gguf.py), less the hybrid families' fixture folders (the carry limit
# is 64 MiB), plus BASE_BUILD's bench_engine and bench_kernels as bench_engine.base /
# bench_kernels.base, so one run compares the branch with the baseline build. Usage:
#   scripts/device/stage_xeon.sh BUILD_DIR BASE_BUILD_DIR DEST
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: scripts/device/stage_xeon.sh BUILD_DIR BASE_BUILD_DIR DEST" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
BUILD=$1
BASE=$2
DEST=$3
scripts/device/stage_amx.sh "$BUILD" "$DEST" >/dev/null
rm -rf "$DEST/fixtures/models/gemma3" "$DEST/fixtures/models/lfm2" "$DEST/fixtures/models/qwen3_5"
strip --strip-debug -o "$DEST/bin/test_thread_pool" "$BUILD/tests/util/test_thread_pool"
for b in bench_engine bench_kernels; do
  strip --strip-debug -o "$DEST/bin/$b.base" "$BASE/bench/$b"
done
[ -x "$BUILD/bench/bench_amx_bf16_probe" ] && strip --strip-debug -o "$DEST/bin/bench_amx_bf16_probe" "$BUILD/bench/bench_amx_bf16_probe"
# Session 6 (PLAN=decode): the sampling profiler, and BEFORE_KERNELS_BENCH (optional) as
# bench_kernels.before: a bench_kernels with the kernels before this branch's rework.
cc -O2 -shared -fPIC -Wall -Wextra -Werror -o "$DEST/lib/libxeon_sampler.so" scripts/device/xeon_sampler.c
if [ -n "${BEFORE_KERNELS_BENCH:-}" ]; then
  strip --strip-debug -o "$DEST/bin/bench_kernels.before" "$BEFORE_KERNELS_BENCH"
fi
cp scripts/device/run_xeon.sh "$DEST/"
du -sh "$DEST"
