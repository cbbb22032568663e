#!/usr/bin/env bash
# Stages device run "amx" (scripts/device/run_amx.sh) into DEST: the CPU build's test and
# bench binaries and cairn (debug info stripped), the non-system shared libraries they
# load, the q256 GGUF fixtures and the model folders test_quant_determinism reads, the
# llama.cpp peer (AVX-512 build) and its hf2gguf.py. Usage:
#   scripts/device/stage_amx.sh BUILD_DIR DEST
# DEST must be an ignored folder of the checkout the device tool carries (see stage.sh).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: scripts/device/stage_amx.sh BUILD_DIR DEST" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
BUILD=$1
DEST=$2
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib" "$DEST/fixtures/models" "$DEST/fixtures/gguf/q256"
for b in src/cairn tests/compute/test_quant_kernels tests/compute/test_quant_amx_emulated \
         tests/engine/test_quant_determinism bench/bench_kernels bench/bench_engine; do
  strip --strip-debug -o "$DEST/bin/$(basename $b)" "$BUILD/$b"
done
for b in "$DEST"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  while read -r l; do cp -L "$l" "$DEST/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/libgomp.so.1 "$DEST/lib/" # llama.cpp's, in case the device lacks it
F=../shared/fixtures
for m in llama qwen3 gemma3 lfm2 qwen3_5; do cp -r $F/models/$m "$DEST/fixtures/models/"; done
cp -r $F/gguf/q256/*.gguf $F/gguf/q256/hf "$DEST/fixtures/gguf/q256/"
chmod -R u+w "$DEST/fixtures"
cp ../shared/peer/llama.cpp-de3ff81-avx512.tar.xz ../shared/peer/hf2gguf.py scripts/device/run_amx.sh "$DEST/"
du -sh "$DEST"
