#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test:
#   1. the release build's ctest suite (warnings are errors);
#   2. the same suite built with ASan+UBSan;
#   3. the same suite built with ThreadSanitizer (clang), every report fatal, stress tests
#      (tests/stress) included: scripts/tsan.sh, which also runs it alone;
#   4. each libFuzzer target, built with clang and smoke-run for a bounded number of inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
JOBS=$(nproc)

echo "== release build and tests"
scripts/build.sh build
ctest --test-dir build --output-on-failure -j"$JOBS"

echo "== ASan+UBSan build and tests"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCAIRN_WERROR=ON -DCAIRN_SANITIZE=ON \
      -DCAIRN_BENCH=OFF >/dev/null
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  CAIRN_SANITIZED=1 ctest --test-dir build-asan --output-on-failure -j"$JOBS"

echo "== ThreadSanitizer build and tests"
tsan_start=$SECONDS
scripts/tsan.sh
echo "ThreadSanitizer stage: $((SECONDS - tsan_start)) s"

echo "== fuzz targets (smoke run)"
CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCAIRN_FUZZ=ON \
      -DCAIRN_TESTS=OFF -DCAIRN_BENCH=OFF >/dev/null
ninja -C build-fuzz
fuzz_runs=${CAIRN_FUZZ_RUNS:-20000}
n_fuzz=0
for f in build-fuzz/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus="fuzz/corpus/${name#fuzz_}"
  args=(-runs="$fuzz_runs" -max_total_time=30 -rss_limit_mb=4096)
  [ -f "fuzz/${name#fuzz_}.dict" ] && args+=(-dict="fuzz/${name#fuzz_}.dict")
  echo "-- $name"
  tmp=$(mktemp -d); log=$(mktemp)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$tmp"/
  # A crash prints its report and the input that caused it (base64), then fails the stage.
  if ! "$f" "${args[@]}" -artifact_prefix="$tmp/" "$tmp" >"$log" 2>&1; then
    grep -v '^#[0-9]' "$log" | tail -n 40
    for a in "$tmp"/crash-* "$tmp"/leak-* "$tmp"/timeout-* "$tmp"/oom-*; do
      [ -f "$a" ] && { echo "input $(basename "$a") (base64):"; base64 -w0 "$a"; echo; }
    done
    echo "fuzz: $name failed"; exit 1
  fi
  tail -n 2 "$log"
  rm -rf "$tmp" "$log"
  n_fuzz=$((n_fuzz + 1))
done
echo "fuzz: $n_fuzz targets smoke-run without a crash"
