#!/usr/bin/env bash
# Stages device run "attn9" (scripts/device/run_attn9.sh, session 9, issue 12) into DEST:
# this build's cairn, bench_attention, bench_engine and the attention tests (debug info
# stripped), main's bench_attention and bench_engine from MAIN_BUILD (the same run measures
# both), the qwen3 fixture, the llama.cpp peer (AVX-512 build) and hf2gguf.py. Usage:
#   scripts/device/stage_attn9.sh BUILD_DIR MAIN_BUILD_DIR DEST
# DEST must be an ignored folder of the checkout the device tool carries (see stage.sh).
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: scripts/device/stage_attn9.sh BUILD_DIR MAIN_BUILD_DIR DEST" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
BUILD=$1
MAIN=$2
DEST=$3
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/main" "$DEST/lib" "$DEST/fixtures/models"
for b in src/cairn bench/bench_attention bench/bench_engine tests/compute/test_attention_tile \
         tests/compute/test_attention_tile_emulated tests/engine/test_attn_tile_engine \
         tests/engine/test_determinism tests/compute/test_attention; do
  strip --strip-debug -o "$DEST/bin/$(basename $b)" "$BUILD/$b"
done
for b in bench/bench_attention bench/bench_engine; do
  strip --strip-debug -o "$DEST/main/$(basename $b)" "$MAIN/$b"
done
for b in "$DEST"/bin/* "$DEST"/main/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  while read -r l; do cp -L "$l" "$DEST/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/libgomp.so.1 "$DEST/lib/" # llama.cpp's, in case the device lacks it
cp -r ../shared/fixtures/models/qwen3 "$DEST/fixtures/models/"
chmod -R u+w "$DEST/fixtures"
cp ../shared/peer/llama.cpp-de3ff81-avx512.tar.xz ../shared/peer/hf2gguf.py scripts/device/run_attn9.sh scripts/device/common.sh "$DEST/"
du -sh "$DEST"
