#!/usr/bin/env bash
# Stages device run "amxpp" (scripts/device/run_amxpp.sh, session 6, issue 12) into DEST:
# what stage_amx.sh stages (this build's test and bench binaries, cairn, their libraries,
# the q256 fixtures, the llama.cpp peer and hf2gguf.py), less the hybrid families' fixture
# folders (the carry limit is 64 MiB), plus test_kernels, test_backend and bench_amx_parts,
# and BASE_BUILD's bench_engine as bench_engine.base. Usage:
#   scripts/device/stage_amxpp.sh BUILD_DIR BASE_BUILD_DIR DEST
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: scripts/device/stage_amxpp.sh BUILD_DIR BASE_BUILD_DIR DEST" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
BUILD=$1
BASE=$2
DEST=$3
scripts/device/stage_amx.sh "$BUILD" "$DEST" >/dev/null
rm -rf "$DEST/fixtures/models/gemma3" "$DEST/fixtures/models/lfm2" "$DEST/fixtures/models/qwen3_5"
for b in tests/compute/test_kernels tests/compute/test_backend bench/bench_amx_parts; do
  strip --strip-debug -o "$DEST/bin/$(basename $b)" "$BUILD/$b"
done
strip --strip-debug -o "$DEST/bin/bench_engine.base" "$BASE/bench/bench_engine"
cp scripts/device/run_amxpp.sh "$DEST/"
du -sh "$DEST"
