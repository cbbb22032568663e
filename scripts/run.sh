#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs Cairn's most useful command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build >/dev/null
exec build/src/cairn --help
