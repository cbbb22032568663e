#!/usr/bin/env bash
# Stages device run "amxtile" (scripts/device/run_amxtile.sh, session 8, issue 12) into DEST:
# this build's cairn, the tile-order tests (test_attention_tile, test_attention_tile_emulated,
# test_attn_tile_engine), test_attention, test_backend, test_determinism, bench_attention and
# bench_engine (debug info stripped), the non-system shared libraries they load, the llama
# and qwen3 fixture folders, the llama.cpp peer (AVX-512 build) and its hf2gguf.py. Usage:
#   scripts/device/stage_amxtile.sh BUILD_DIR DEST
# DEST must be an ignored folder of the checkout the device tool carries (see stage.sh).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: scripts/device/stage_amxtile.sh BUILD_DIR DEST" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
BUILD=$1
DEST=$2
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib" "$DEST/fixtures/models"
for b in src/cairn tests/compute/test_attention tests/compute/test_attention_tile \
         tests/compute/test_attention_tile_emulated tests/compute/test_backend \
         tests/engine/test_attn_tile_engine tests/engine/test_determinism \
         bench/bench_attention bench/bench_engine; do
  strip --strip-debug -o "$DEST/bin/$(basename $b)" "$BUILD/$b"
done
for b in "$DEST"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  while read -r l; do cp -L "$l" "$DEST/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/libgomp.so.1 "$DEST/lib/" # llama.cpp's, in case the device lacks it
F=../shared/fixtures
for m in llama qwen3; do cp -r $F/models/$m "$DEST/fixtures/models/"; done
chmod -R u+w "$DEST/fixtures"
cp ../shared/peer/llama.cpp-de3ff81-avx512.tar.xz ../shared/peer/hf2gguf.py scripts/device/run_amxtile.sh "$DEST/"
du -sh "$DEST"
