#!/usr/bin/env bash
# The C unit tests under sanitizers (gcc): AddressSanitizer + UndefinedBehaviorSanitizer for every
# unit test, ThreadSanitizer for the modules shared between threads (ring, intern, http).
# Build trees: build-asan/ and build-tsan/ (only the unit test programs are built). Any report
# fails the run. Called by .ci/run after `make test`; run it by hand the same way:
#   bash scripts/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MESON=${MESON:-meson}
NINJA=${NINJA:-ninja}
if [ -x .venv/bin/meson ]; then MESON=.venv/bin/meson; NINJA=.venv/bin/ninja; fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

setup() { # dir, sanitizers
    if [ ! -f "$1/build.ninja" ]; then
        CC=${CC:-gcc} "$MESON" setup "$1" -Db_sanitize="$2" -Db_lundef=false -Dbuildtype=debug \
            -Doptimization=1 >/dev/null
    fi
}

echo "== ASan+UBSan: unit tests"
setup build-asan address,undefined
"$NINJA" -C build-asan tests/unit/test_ring tests/unit/test_intern tests/unit/test_sql tests/unit/test_http \
    tests/unit/test_report tests/unit/test_capture
"$MESON" test -C build-asan --no-rebuild --suite unit --print-errorlogs ring intern sql http report capture

echo "== TSan: ring, intern, http"
setup build-tsan thread
"$NINJA" -C build-tsan tests/unit/test_ring tests/unit/test_intern tests/unit/test_http
"$MESON" test -C build-tsan --no-rebuild --print-errorlogs ring intern http
