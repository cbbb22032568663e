#!/usr/bin/env bash
# The ThreadSanitizer stage of scripts/test.sh, runnable alone: configures build-tsan with
# clang and -DCAIRN_TSAN=ON (RelWithDebInfo: TSan's cost is per memory access, -O2 keeps it
# ~5-15x), builds it, and runs ctest there with every report fatal. Extra arguments go to
# ctest, e.g.
#   scripts/tsan.sh -L stress                 # only the stress tests (tests/stress)
#   scripts/tsan.sh -R 'test_http|test_sched' # a subset while iterating
#   CAIRN_TSAN_ALL=1 scripts/tsan.sh          # every test, NO_THREADS below included
# TSAN_OPTIONS in the environment is appended (later options win). Suppressions are
# tests/tsan.supp: third-party code only, each with its reason (see the file).
#
# What the stage runs: every test, new ones included (the I/O threads' and the Redis
# tier's tests run here as they land), except NO_THREADS below: tests that start no thread
# at all (checked with strace: no clone with CLONE_THREAD), so TSan has nothing to report
# in them, and that cost >= 10 s each under it. CAIRN_TSAN_ALL=1 runs them too; a test
# that gains a thread must leave the list. docs/DESIGN.md ("Threads and shared state")
# has what the stage costs.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CAIRN_TSAN_BUILD:-build-tsan}
JOBS=${CAIRN_TEST_JOBS:-$(nproc)}
NO_THREADS=(
  test_checkpoint       # safetensors parsing and loading
  test_sampler          # sampling and stop matching
  test_kv_model         # the KV core against its model
  test_recurrent_store  # recurrent state snapshots
  test_synth            # synthetic checkpoints
)
args=()
if [ "${CAIRN_TSAN_ALL:-0}" != 1 ]; then
  args+=(-E "^($(IFS='|'; echo "${NO_THREADS[*]}"))\$")
fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCAIRN_WERROR=ON -DCAIRN_TSAN=ON -DCAIRN_BENCH=OFF >/dev/null
ninja -C "$BUILD"
# halt_on_error: the first report fails the test (exit 66), naming both stacks;
# second_deadlock_stack: lock-order reports show where each lock was taken;
# history_size=4: enough of each thread's past to give the earlier access its stack.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4 suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}"
# clang 14's TSan runtime (Debian 12) expects the kernel's default 28 bits of mmap
# randomization and aborts at start ("unexpected memory mapping") with more; there the
# tests run with address randomization off (setarch -R, inherited by child processes).
run=()
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ]; then
  run=(setarch "$(uname -m)" -R)
fi
"${run[@]}" ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS" "${args[@]}" "$@"
