#!/bin/bash
# Builds forkbox plainly and with ASan+UBSan, then runs every test on each
# build: cmocka unit tests (meson test), the format check, and the pytest
# integration suite against a real forkboxd.  Ends with one summary line
# "N passed, N failed" and exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

BUILDS=${FORKBOX_TEST_BUILDS:-"build build-asan"}
passed=0
failed=0
skipped=0
failures=()

count_pytest() { # parses pytest's closing line
    local line=$1 n
    for word in passed failed error errors xfailed xpassed skipped; do
        n=$(echo "$line" | grep -oE "[0-9]+ $word" | head -1 | cut -d' ' -f1)
        n=${n:-0}
        case $word in
            passed|xfailed) passed=$((passed + n)) ;;
            failed|error|errors|xpassed) failed=$((failed + n)) ;;
            skipped) skipped=$((skipped + n)) ;;
        esac
    done
}

for b in $BUILDS; do
    echo "=== build: $b"
    opts=""
    case $b in *asan*|*san*) opts="-Db_sanitize=address,undefined -Db_lundef=false" ;; esac
    if ! ./scripts/build.sh "$b" $opts; then
        failed=$((failed + 1)); failures+=("build $b")
        continue
    fi

    echo "=== unit tests ($b)"
    out=$(meson test -C "$b" --suite unit --print-errorlogs 2>&1)
    echo "$out" | grep -E "^ *[0-9]+/[0-9]+ |^Ok:|^Fail:|FAIL" || true
    ok=$(echo "$out" | grep -E "^Ok:" | grep -oE "[0-9]+" | head -1)
    bad=$(echo "$out" | grep -E "^Fail:" | grep -oE "[0-9]+" | head -1)
    passed=$((passed + ${ok:-0})); failed=$((failed + ${bad:-0}))
    [ "${bad:-0}" -eq 0 ] || failures+=("unit tests ($b)")
    [ -n "$ok" ] || { failed=$((failed + 1)); failures+=("unit tests did not run ($b)"); echo "$out" | tail -20; }

    echo "=== integration tests ($b)"
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=23"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    log=$(mktemp)
    # one test daemon at a time may own the test socket
    FORKBOX_BUILD_DIR="$(pwd)/$b" flock /tmp/forkbox-it.lock /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration tests/security tests/netlab 2>&1 | tee "$log"
    summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed|error)|no tests ran" "$log" | tail -1)
    rm -f "$log"
    if [ -z "$summary" ]; then
        failed=$((failed + 1)); failures+=("integration tests did not report ($b)")
    else
        before=$failed
        count_pytest "$summary"
        [ "$failed" -eq "$before" ] || failures+=("integration tests ($b)")
    fi
done

echo "=== format check"
if ./scripts/format-check.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("format check"); fi

echo
for f in "${failures[@]}"; do echo "FAILED: $f"; done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
