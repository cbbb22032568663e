#!/usr/bin/env bash
# Stages device run "amxfold" (scripts/device/run_amxfold.sh, session 8, issue 12) into DEST:
# this build's cairn, bench_engine, test_quant_kernels and test_quant_amx_emulated; MAIN_BUILD's
# bench_engine as bench_engine.main; bench_amx_parts built five ways from this tree's bench
# source (amx_parts_real.c compiles quant_amx.c into it): parts.new (this branch's file),
# parts.main (MAIN_SRC's quant_amx.c first on the include path), parts.kq2 (-DAMX_KQ_SCHED=2),
# parts.ahead0 and parts.ahead1 (-DAMX_B32_AHEAD=0 / 1); the non-system shared libraries,
# the llama.cpp peer (AVX-512 build) and its hf2gguf.py. Usage:
#   scripts/device/stage_amxfold.sh BUILD_DIR MAIN_SRC MAIN_BUILD DEST
# (MAIN_SRC: a checkout of main's tree; DEST an ignored folder of the carried checkout.)
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: scripts/device/stage_amxfold.sh BUILD_DIR MAIN_SRC MAIN_BUILD DEST" >&2
  exit 2
fi
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=$(cd "$1" && pwd); MAIN_SRC=$(cd "$2" && pwd); MAIN_BUILD=$(cd "$3" && pwd); DEST=$4
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for b in src/cairn bench/bench_engine tests/compute/test_quant_kernels tests/compute/test_quant_amx_emulated; do
  strip --strip-debug -o "$DEST/bin/$(basename $b)" "$BUILD/$b"
done
strip --strip-debug -o "$DEST/bin/bench_engine.main" "$MAIN_BUILD/bench/bench_engine"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/mainx/compute/cpu/x86"
cp "$MAIN_SRC/src/compute/cpu/x86/quant_amx.c" "$T/mainx/compute/cpu/x86/"
CF="-D_GNU_SOURCE -O2 -DNDEBUG -std=c11 -fno-strict-aliasing -Wall -Wextra -Wno-unused-parameter -Werror"
LIBS="$BUILD/src/libcairn.a $(pkg-config --libs libcrypto libxxhash libpcre2-8 libcjson libutf8proc hiredis libmicrohttpd liburing liblzma) -lm -lpthread"
TOOLS=$(ls "$BUILD"/src/CMakeFiles/cairn_tools.dir/tools/*.o)
parts() { # name, extra flags...
  local n=$1; shift
  cc $CF "$@" -I"$ROOT/include" -I"$ROOT/src" -isystem /usr/include/cjson -c -o "$T/p.o" bench/bench_amx_parts.c
  cc $CF "$@" -I"$ROOT/include" -I"$ROOT/src" -isystem /usr/include/cjson -c -o "$T/r.o" bench/amx_parts_real.c
  cc -o "$DEST/bin/parts.$n" "$T/p.o" "$T/r.o" $TOOLS $LIBS
}
parts new
parts main -I"$T/mainx"
parts kq2 -DAMX_KQ_SCHED=2
parts ahead0 -DAMX_B32_AHEAD=0
parts ahead1 -DAMX_B32_AHEAD=1
for b in "$DEST"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  while read -r l; do cp -L "$l" "$DEST/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/libgomp.so.1 "$DEST/lib/" # llama.cpp's, in case the device lacks it
cp ../shared/peer/llama.cpp-de3ff81-avx512.tar.xz ../shared/peer/hf2gguf.py scripts/device/run_amxfold.sh "$DEST/"
du -sh "$DEST"
