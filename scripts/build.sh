#!/bin/sh
# Configures (once) and builds a meson build directory.
# usage: scripts/build.sh BUILD_DIR [meson setup options...]
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >/dev/null
fi
ninja -C "$dir" >/dev/null || ninja -C "$dir"
