#!/usr/bin/env bash
# Builds and runs scripts/dev/amx_simde_check.c: quant_amx.c (or the file given as $1) on a
# CPU without AVX-512, through SIMDe (apt-get install libsimde-dev) and the tile model, against
# the portable rows. Needs a configured build in $BUILD (default build/) for libcairn.a.
# Usage: [EXTRA_CFLAGS=-fsanitize=address,undefined] scripts/dev/amx_simde_check.sh [quant_amx.c] [break]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
SRC=${1:-$ROOT/src/compute/cpu/x86/quant_amx.c}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# no target attributes: SIMDe's portable code must not be compiled for AVX-512
sed -e 's/^#define TA __attribute__((target([^)]*)))/#define TA/' "$SRC" > "$TMP/quant_amx_sim.c"
ninja -C "$BUILD" -j2 src/libcairn.a >/dev/null
gcc -std=gnu11 -O1 -g ${EXTRA_CFLAGS:-} -D_GNU_SOURCE -DCAIRN_HAVE_X86=1 -DQUANT_AMX_C="\"$TMP/quant_amx_sim.c\"" \
    -I"$ROOT/include" -I"$ROOT/src" -o "$TMP/check" "$ROOT/scripts/dev/amx_simde_check.c" \
    "$BUILD/src/libcairn.a" $(pkg-config --libs libcrypto libxxhash libpcre2-8 libcjson libutf8proc hiredis) -lm -lpthread
"$TMP/check" ${2:-}
