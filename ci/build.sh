#!/usr/bin/env bash
# Configures (once) and builds a build directory. Usage: ci/build.sh [DIR] [meson setup args...]
# On a directory configured before, the -D arguments are applied again with meson configure (so
# that, say, a moved -Ducx_prefix takes effect); nothing is rebuilt when they did not change.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" "$@"
elif [ $# -gt 0 ]; then
  meson configure "$dir" "$@" > /dev/null
fi
ninja -C "$dir" -j"$(nproc)"
