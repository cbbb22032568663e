#!/usr/bin/env bash
# Installs the build into a temporary prefix and checks what a user of the library gets:
#   1. libcairn.so exports only symbols declared in include/cairn (all cairn_*), and every
#      CAIRN_API declaration of the public headers is exported;
#   2. the headers, both libraries, the `cairn` command and cairn.pc are installed;
#   3. a program built with `pkg-config --cflags --libs cairn` against the installed files
#      links to the shared library and runs.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR [CC [CFLAGS]]
# CC and CFLAGS build the user program (default: cc, none); a sanitized library needs the
# same sanitizer in the program (ThreadSanitizer's runtime is linked into executables only).
set -euo pipefail
build=$1 src=$2 user_cc=${3:-cc} user_cflags=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_install: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
lib=$(ls "$tmp"/prefix/lib*/libcairn.so.0 2>/dev/null | head -n 1)
[ -n "$lib" ] || fail "libcairn.so.0 not installed"
libdir=$(dirname "$lib")
[ -f "$libdir/libcairn.a" ] || fail "libcairn.a not installed"
[ -x "$tmp/prefix/bin/cairn" ] || fail "the cairn command is not installed"
[ -f "$libdir/pkgconfig/cairn.pc" ] || fail "cairn.pc not installed"
for h in "$src"/include/cairn/*.h; do
  [ -f "$tmp/prefix/include/cairn/$(basename "$h")" ] || fail "header $(basename "$h") not installed"
done

# 1. Exports: defined dynamic symbols vs the CAIRN_API declarations.
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDRBVW]$/ {print $3}' | sort -u >"$tmp/exported"
grep -h '^CAIRN_API' "$src"/include/cairn/*.h | sed -E 's/\(.*//; s/.*[ *]//' | sort -u >"$tmp/declared"
extra=$(comm -23 "$tmp/exported" "$tmp/declared" | grep -vE '^(_init|_fini)$' || true)
[ -z "$extra" ] || fail "libcairn.so exports symbols that are not public API: $(echo $extra | head -c 600)"
missing=$(comm -13 "$tmp/exported" "$tmp/declared" || true)
[ -z "$missing" ] || fail "public API not exported (declared CAIRN_API but not defined?): $(echo $missing | head -c 600)"
echo "exports: $(wc -l <"$tmp/exported") symbols, all declared CAIRN_API in include/cairn"

# 3. A user program through pkg-config.
cat >"$tmp/user.c" <<'C'
#include <stdio.h>
#include "cairn/common.h"
#include "cairn/kv_cache.h"
int main(void)
{
    cairn_kv_layer_spec_t layer = {CAIRN_KV_LAYER_FULL, 1, 8, 0, 0};
    cairn_kv_config_t cfg = {0};
    cfg.n_layers = 1;
    cfg.layers = &layer;
    cfg.dtype = CAIRN_DTYPE_F32;
    cfg.memory_mib = 1;
    cairn_kv_cache_t *c = NULL;
    int rc = cairn_kv_cache_create(&cfg, &c);
    printf("cairn %s: kv cache %s\n", cairn_version(), cairn_strerror(rc));
    cairn_kv_cache_destroy(c);
    return rc != 0;
}
C
export PKG_CONFIG_PATH="$libdir/pkgconfig"
san="$user_cflags"
# A sanitized build installs a sanitized library: the program must carry the same runtime
# (ASan's is a shared library libcairn.so names; ThreadSanitizer's is linked into
# executables only, so the TSan build passes its flags as CFLAGS).
# (ldd's output is read whole: `ldd | grep -q` under pipefail fails when grep exits first and
# ldd dies of SIGPIPE, which made this check flaky.)
lib_deps=$(ldd "$lib")
if grep -q libasan <<<"$lib_deps"; then san="$san -fsanitize=address,undefined"; fi
"$user_cc" -std=c11 $san -o "$tmp/user" "$tmp/user.c" $(pkg-config --cflags --libs cairn) || fail "cannot build against the installed library"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/user") || fail "the user program failed: $out"
user_deps=$(LD_LIBRARY_PATH="$libdir" ldd "$tmp/user")
grep -qF "$libdir/libcairn.so.0" <<<"$user_deps" || fail "the user program is not linked to the installed libcairn.so"
echo "$out"
