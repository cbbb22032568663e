#!/usr/bin/env bash
# Installs npm packages into PREFIX (the build tree) for the client tests: by default the
# official `openai` (current major) and `@anthropic-ai/sdk` clients; other specs may be
# given (the agent CLI test installs `@anthropic-ai/claude-code`). Needs node and npm; a
# failure here fails the test (it never skips). A stamp per package list makes reruns free.
# Usage: tests/server/setup_client.sh PREFIX [SPEC...]
set -euo pipefail
PREFIX=${1:?usage: setup_client.sh PREFIX [SPEC...]}
shift
SPECS=("$@")
[ ${#SPECS[@]} -gt 0 ] || SPECS=(openai@7 @anthropic-ai/sdk@1)
command -v node >/dev/null || { echo "setup_client: node is not installed" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup_client: npm is not installed" >&2; exit 1; }
STAMP="$PREFIX/.installed-$(printf '%s\n' "${SPECS[@]}" | sha256sum | cut -c1-16)"
[ -f "$STAMP" ] && exit 0
mkdir -p "$PREFIX"
# Serialize concurrent installs (ctest -j) into the same prefix.
exec 9>"$PREFIX/.install.lock"
flock 9
[ -f "$STAMP" ] && exit 0
npm install --prefix "$PREFIX" --no-audit --no-fund --silent "${SPECS[@]}" >&2
touch "$STAMP"
