#!/usr/bin/env bash
# Stages what a run on the GPU device needs into DEST: the CUDA build's binaries (debug
# info stripped), the non-system shared libraries they load, the dense fixtures, the SDPA
# baseline and the run scripts. Usage:
#   scripts/device/stage.sh BUILD_DIR DEST [MODEL ...]
# MODEL: the fixture models to copy (default: llama llama31 qwen3 qwen3_f32 gemma3).
# EXTRA_BIN=DIR: also DIR's files into bin/ under the same relative names (bin/r4/...).
# PACK=1: see below. The
# device tool carries at most 64 MiB with the checkout (~8 MiB tracked in session 5), and
# the six binaries alone are ~30 MiB since the attention kernels doubled (session 5): name
# fewer models (qwen3 gemma3 for the engine test and check-reference qwen3) when the
# staged folder would pass ~55 MiB.
# The device tool carries the checkout its session was started in (plus the git-ignored
# folders named in its `carry`), so DEST must be an ignored folder of THAT checkout; there
# is no default, since that checkout may be someone else's (the lead's /work/main), where
# nothing may be written without asking.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: scripts/device/stage.sh BUILD_DIR DEST [MODEL ...]" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
BUILD=$1
DEST=$2
shift 2
MODELS=${*:-llama llama31 qwen3 qwen3_f32 gemma3}
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib" "$DEST/fixtures/models"
for b in src/cairn tests/compute/test_cuda_backend tests/engine/test_cuda_engine \
         bench/bench_cuda_attention bench/bench_cuda_gemm bench/bench_cuda_engine; do
  strip --strip-debug -o "$DEST/bin/$(basename $b)" "$BUILD/$b"
done
# Shared libraries: everything ldd resolves except glibc, libstdc++/libgcc and CUDA's own.
for b in "$DEST"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so|cuda|cublas' |
  while read -r l; do cp -L "$l" "$DEST/lib/"; done
for m in $MODELS; do cp -r ../shared/fixtures/models/$m "$DEST/fixtures/models/"; done
chmod -R u+w "$DEST/fixtures"
cp bench/cuda/sdpa_decode.py scripts/device/run_*.sh "$DEST/"
if [ -n "${EXTRA_BIN:-}" ]; then cp -r "$EXTRA_BIN"/. "$DEST/bin/"; fi
if [ -n "${PACK:-}" ]; then
  # PACK=1: everything but the run scripts in one pack.tar.xz (the binaries compress ~4x;
  # a run script unpacks it into /tmp/c and runs from there: run_21.sh and later).
  tar -C "$DEST" -cJf "$DEST/pack.tar.xz" bin lib fixtures sdpa_decode.py
  rm -rf "$DEST/bin" "$DEST/lib" "$DEST/fixtures" "$DEST/sdpa_decode.py"
fi
du -sh "$DEST"
if [ "$(du -sm "$DEST" | cut -f1)" -gt 55 ]; then
  echo "warning: $DEST holds more than 55 MiB; with the checkout it may pass the device tool's 64 MiB (name fewer models)" >&2
fi
