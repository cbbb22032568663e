#!/usr/bin/env bash
# The ThreadSanitizer stage of scripts/test.sh, runnable alone: configures build-tsan with
# clang and -DCAIRN_TSAN=ON (RelWithDebInfo: TSan's cost is per memory access, -O2 keeps it
# ~5-15x), builds it, and runs ctest there with every report fatal. Extra arguments go to
# ctest, e.g.
#   scripts/tsan.sh -L stress                 # only the stress tests (tests/stress)
#   scripts/tsan.sh -R 'test_http|test_sched' # a subset while iterating
# TSAN_OPTIONS in the environment is appended (later options win). Suppressions are
# tests/tsan.supp: third-party code only, each with its reason (see the file).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CAIRN_TSAN_BUILD:-build-tsan}
JOBS=${CAIRN_TEST_JOBS:-$(nproc)}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCAIRN_WERROR=ON -DCAIRN_TSAN=ON -DCAIRN_BENCH=OFF >/dev/null
ninja -C "$BUILD"
# halt_on_error: the first report fails the test (exit 66), naming both stacks;
# second_deadlock_stack: lock-order reports show where each lock was taken;
# history_size=4: enough of each thread's past to give the earlier access its stack.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4 suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}"
ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS" "$@"
