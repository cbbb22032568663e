#!/usr/bin/env bash
# The main job: installs what is missing, builds, and starts the OpenAI-compatible server.
# With no MODEL_DIR argument it serves a small random model synthesized on first run (no
# download); pass a Hugging Face checkpoint folder to serve a real model. Extra arguments
# go to `cairn serve` (see `build/src/cairn serve --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build >/dev/null
exec build/src/cairn serve "$@"
