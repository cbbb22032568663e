#!/usr/bin/env bash
# Stages device run "lead9" (scripts/device/run_lead9.sh, session 9, issue 12) into DEST:
# this build's cairn, bench_engine, bench_attention, bench_kernels and the AMX machine's
# tests (debug info stripped), BASE_DIR's bench_engine / bench_attention as *.base (the
# session's starting point, for same-run ratios), the non-system shared libraries, the
# llama and qwen3 fixture folders, the llama.cpp peer (AVX-512 build) and hf2gguf.py. Usage:
#   scripts/device/stage_lead9.sh BUILD_DIR BASE_DIR DEST
# DEST must be an ignored folder of the checkout the device tool carries (see stage.sh).
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: scripts/device/stage_lead9.sh BUILD_DIR BASE_DIR DEST" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
BUILD=$1
BASE=$2
DEST=$3
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib" "$DEST/fixtures/models"
for b in src/cairn bench/bench_engine bench/bench_attention bench/bench_kernels \
         tests/compute/test_attention_tile tests/engine/test_attn_tile_engine tests/engine/test_determinism \
         tests/compute/test_attention tests/compute/test_attention_amx tests/engine/test_attn_pair_engine \
         tests/compute/test_backend tests/compute/test_quant_kernels tests/compute/test_quant_amx_emulated; do
  strip --strip-debug -o "$DEST/bin/$(basename $b)" "$BUILD/$b"
done
for b in bench_engine bench_attention; do strip --strip-debug -o "$DEST/bin/$b.base" "$BASE/$b"; done
# S3_BUILD (optional): a build with -DAMX_KQ_SCHED=3, staged as *.s3
if [ -n "${S3_BUILD:-}" ]; then
  strip --strip-debug -o "$DEST/bin/bench_engine.s3" "$S3_BUILD/bench/bench_engine"
  strip --strip-debug -o "$DEST/bin/test_quant_kernels.s3" "$S3_BUILD/tests/compute/test_quant_kernels"
fi
for b in "$DEST"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  while read -r l; do cp -L "$l" "$DEST/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/libgomp.so.1 "$DEST/lib/" # llama.cpp's, in case the device lacks it
for m in llama qwen3; do cp -r ../shared/fixtures/models/$m "$DEST/fixtures/models/"; done
chmod -R u+w "$DEST/fixtures"
cp ../shared/peer/llama.cpp-de3ff81-avx512.tar.xz ../shared/peer/hf2gguf.py scripts/device/run_lead9.sh scripts/device/common.sh "$DEST/"
du -sh "$DEST"
