#!/usr/bin/env bash
# Stages device run "prof9" (scripts/device/run_prof9.sh, session 9, issue 12) into DEST:
# this build's cairn, bench_attention, bench_engine, bench_amx_parts and the AMX tests
# (debug info stripped; the unstripped files stay in BUILD for symbolizing), the non-system
# shared libraries they load, the sampling profiler (xeon_sampler.c), the qwen3 fixture, the
# llama.cpp peer (AVX-512 build) and hf2gguf.py. Usage:
#   scripts/device/stage_prof9.sh BUILD_DIR DEST
# DEST must be an ignored folder of the checkout the device tool carries (see stage.sh).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: scripts/device/stage_prof9.sh BUILD_DIR DEST" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
BUILD=$1
DEST=$2
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib" "$DEST/fixtures/models"
for b in src/cairn bench/bench_attention bench/bench_engine bench/bench_amx_parts \
         tests/compute/test_attention_tile tests/engine/test_attn_tile_engine \
         tests/compute/test_quant_kernels tests/compute/test_attention ${EXTRA_BINS:-}; do
  strip --strip-debug -o "$DEST/bin/$(basename $b)" "$BUILD/$b"
done
for b in "$DEST"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  while read -r l; do cp -L "$l" "$DEST/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/libgomp.so.1 "$DEST/lib/" # llama.cpp's, in case the device lacks it
cc -O2 -shared -fPIC -Wall -Wextra -Werror -o "$DEST/lib/libxeon_sampler.so" scripts/device/xeon_sampler.c
cp -r ../shared/fixtures/models/qwen3 "$DEST/fixtures/models/"
chmod -R u+w "$DEST/fixtures"
cp ../shared/peer/llama.cpp-de3ff81-avx512.tar.xz ../shared/peer/hf2gguf.py scripts/device/run_prof9.sh scripts/device/common.sh "$DEST/"
du -sh "$DEST"
