#!/bin/sh
# Fails when any C file differs from what clang-format makes of it.
set -eu
cd "$(dirname "$0")/.."
bad=0
for f in $(git ls-files '*.c' '*.h'); do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "needs formatting: $f"
        bad=1
    fi
done
exit $bad
