#!/usr/bin/env bash
# Stages device run "kq9" (scripts/device/run_kq9.sh, session 9, issue 12) into DEST: this
# build's cairn, bench_engine, test_quant_kernels and test_quant_amx_emulated; MAIN_BUILD's
# bench_engine as bench_engine.main; bench_engine.s3 (this build's bench_engine relinked
# against a copy of libcairn.a whose quant_amx.c object is built with -DAMX_KQ_SCHED=3);
# bench_amx_parts built from this tree's bench source four ways (amx_parts_real.c compiles
# quant_amx.c into it): parts.new (this branch's file), parts.main (MAIN_SRC's quant_amx.c
# first on the include path), parts.s3 (-DAMX_KQ_SCHED=3), parts.s3p2 (-DAMX_KQ_SCHED=3
# -DAMX_KQ_PIECE=2); the non-system shared libraries, the qwen3 fixture, the llama.cpp peer
# (AVX-512 build) and hf2gguf.py. Usage:
#   scripts/device/stage_kq9.sh BUILD_DIR MAIN_SRC MAIN_BUILD DEST
# (MAIN_SRC: main's tree; DEST an ignored folder of the carried checkout, e.g.
# /work/main/.devcarry/kq9.)
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: scripts/device/stage_kq9.sh BUILD_DIR MAIN_SRC MAIN_BUILD DEST" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=$(cd "$1" && pwd); MAIN_SRC=$(cd "$2" && pwd); MAIN_BUILD=$(cd "$3" && pwd); DEST=$4
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib" "$DEST/fixtures/models"
for b in src/cairn bench/bench_engine tests/compute/test_quant_kernels tests/compute/test_quant_amx_emulated; do
  strip --strip-debug -o "$DEST/bin/$(basename $b)" "$BUILD/$b"
done
strip --strip-debug -o "$DEST/bin/bench_engine.main" "$MAIN_BUILD/bench/bench_engine"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
PKGS="libcrypto libxxhash libpcre2-8 libcjson libutf8proc hiredis libmicrohttpd liburing liblzma"
# bench_engine.s3: the library with quant_amx.c's schedule 3
cc -DCAIRN_HAVE_X86=1 -D_GNU_SOURCE -I"$ROOT/include" -I"$ROOT/src" -isystem /usr/include/cjson -O3 -DNDEBUG \
   -fPIC -fvisibility=hidden -Wall -Wextra -Wshadow -Wno-unused-parameter -fno-strict-aliasing -O2 -std=c11 \
   -Werror -DAMX_KQ_SCHED=3 -c -o "$T/quant_amx.c.o" src/compute/cpu/x86/quant_amx.c
cp "$BUILD/src/libcairn.a" "$T/libcairn.a"
(cd "$T" && ar r libcairn.a quant_amx.c.o)
cc -O3 -DNDEBUG "$BUILD"/src/CMakeFiles/cairn_tools.dir/tools/*.o "$BUILD/bench/CMakeFiles/bench_engine.dir/bench_engine.c.o" \
   -o "$T/bench_engine.s3" "$T/libcairn.a" $(pkg-config --libs $PKGS) -lm -lpthread
strip --strip-debug -o "$DEST/bin/bench_engine.s3" "$T/bench_engine.s3"
mkdir -p "$T/mainx/compute/cpu/x86"
cp "$MAIN_SRC/src/compute/cpu/x86/quant_amx.c" "$T/mainx/compute/cpu/x86/"
CF="-D_GNU_SOURCE -O2 -DNDEBUG -std=c11 -fno-strict-aliasing -Wall -Wextra -Wno-unused-parameter -Werror"
LIBS="$BUILD/src/libcairn.a $(pkg-config --libs $PKGS) -lm -lpthread"
TOOLS=$(ls "$BUILD"/src/CMakeFiles/cairn_tools.dir/tools/*.o)
parts() { # name, extra flags...
  local n=$1; shift
  cc $CF "$@" -I"$ROOT/include" -I"$ROOT/src" -isystem /usr/include/cjson -c -o "$T/p.o" bench/bench_amx_parts.c
  cc $CF "$@" -I"$ROOT/include" -I"$ROOT/src" -isystem /usr/include/cjson -c -o "$T/r.o" bench/amx_parts_real.c
  cc -o "$DEST/bin/parts.$n" "$T/p.o" "$T/r.o" $TOOLS $LIBS
}
parts new
parts main -I"$T/mainx"
parts s3 -DAMX_KQ_SCHED=3
parts s3p2 -DAMX_KQ_SCHED=3 -DAMX_KQ_PIECE=2
for b in "$DEST"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  while read -r l; do cp -L "$l" "$DEST/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/libgomp.so.1 "$DEST/lib/" # llama.cpp's, in case the device lacks it
cp -r ../shared/fixtures/models/qwen3 "$DEST/fixtures/models/"
chmod -R u+w "$DEST/fixtures"
cp ../shared/peer/llama.cpp-de3ff81-avx512.tar.xz ../shared/peer/hf2gguf.py scripts/device/run_kq9.sh scripts/device/common.sh "$DEST/"
du -sh "$DEST"
