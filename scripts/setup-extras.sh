#!/usr/bin/env bash
# Installs what the exporter and export tests use besides probing itself, when it is missing:
#   - Debian's prometheus package (prometheus and promtool: a real server scrapes
#     `probing exporter` in tests/integration/test_exporter.py)
#   - into .venv: pyarrow (export --parquet writes with it), duckdb (reads the files back),
#     HolisticTraceAnalysis (reads `capture -o` traces)
# Best effort: whatever cannot be installed here is reported, and the tests that need it skip
# with the reason. Idempotent. `make test` runs it after scripts/setup.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
VPY=.venv/bin/python

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    if [ -z "$SUDO" ] || command -v sudo >/dev/null 2>&1; then
        echo "setup-extras: installing Debian package prometheus"
        ($SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
            --no-install-recommends prometheus >/dev/null) \
            || echo "setup-extras: prometheus could not be installed; its tests will skip"
    else
        echo "setup-extras: not root and no sudo: prometheus not installed; its tests will skip"
    fi
fi

for pkg in pyarrow duckdb HolisticTraceAnalysis; do
    mod=$pkg
    [ "$pkg" = HolisticTraceAnalysis ] && mod=hta
    if ! $VPY -c "import $mod" 2>/dev/null; then
        echo "setup-extras: installing $pkg into .venv"
        $VPY -m pip install -q "$pkg" \
            || echo "setup-extras: $pkg could not be installed; the tests that need it will skip"
    fi
done
exit 0
