#!/usr/bin/env bash
# Configures and builds Cairn into build/ (warnings are errors). Usage: scripts/build.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCAIRN_WERROR=ON >/dev/null
ninja -C "$BUILD"
