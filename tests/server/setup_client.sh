#!/usr/bin/env bash
# Installs the official `openai` npm package into PREFIX (default: build tree) for the
# client test. Needs node and npm; a failure here fails the test (it never skips).
# Usage: tests/server/setup_client.sh PREFIX
set -euo pipefail
PREFIX=${1:?usage: setup_client.sh PREFIX}
command -v node >/dev/null || { echo "setup_client: node is not installed" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup_client: npm is not installed" >&2; exit 1; }
if [ -f "$PREFIX/node_modules/openai/package.json" ]; then
  exit 0
fi
mkdir -p "$PREFIX"
# Serialize concurrent installs (ctest -j) into the same prefix.
exec 9>"$PREFIX/.install.lock"
flock 9
[ -f "$PREFIX/node_modules/openai/package.json" ] && exit 0
npm install --prefix "$PREFIX" --no-audit --no-fund --silent openai@4 >&2
