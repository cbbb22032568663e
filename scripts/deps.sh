#!/usr/bin/env bash
# Installs the Debian 12 packages Cairn needs that are missing. Run as root (or with
# sudo available); does nothing when everything is present.
set -euo pipefail
# libhiredis-dev is the shared cache tier's Redis client; redis-server is what its tests
# (and the two-server setup of the README) run against, on loopback.
# libclang-rt-dev is clang's sanitizer and libFuzzer runtime (libclang_rt.*, the default
# clang's version): the fuzz stage links against it, and clang only recommends it, which
# --no-install-recommends skips.
# liblzma-dev: `cairn check-reference` reads the fixtures' .xz reference logits in place.
PKGS=(build-essential cmake ninja-build pkg-config clang libclang-rt-dev xz-utils
      libssl-dev libxxhash-dev libpcre2-dev libcjson-dev libutf8proc-dev
      libmicrohttpd-dev liburing-dev libcmocka-dev liblzma-dev
      libhiredis-dev redis-server)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node + npm run the official `openai` and `@anthropic-ai/sdk` clients in the server tests
# and install Claude Code (a native binary) for the agent CLI test; node >= 18 (the tests
# ran on 20), so an existing installation (e.g. from another repository) is kept.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
