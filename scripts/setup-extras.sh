#!/usr/bin/env bash
# Installs the real third-party tools that some integration tests drive, when missing:
#   - Debian: prometheus (prometheus and promtool scrape and check `probing exporter`,
#     tests/integration/test_exporter.py), chromium and chromium-driver (the web view's browser
#     tests, tests/integration/test_ui.py)
#   - into .venv: pyarrow (export --parquet writes with it), duckdb (reads the files back),
#     HolisticTraceAnalysis (reads `capture -o` traces), selenium (drives chromium), mcp (the
#     official Model Context Protocol SDK: its client drives `probing mcp`, test_mcp.py), fastapi
#     and uvicorn (a real ASGI server in front of a model, test_requests.py)
# Best effort and never fatal: whatever cannot be installed is reported, and the tests that need
# it skip with the reason. Idempotent. `make test` (its integration part) runs it after
# scripts/setup.sh; `make demo` does not need it. PROBING_SETUP_BROWSER=0 leaves the browser out.
set -uo pipefail
cd "$(dirname "$0")/.."
VPY=.venv/bin/python

debs=""
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || debs="prometheus"
if [ "${PROBING_SETUP_BROWSER:-1}" != 0 ] &&
   { ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; }; then
    debs="$debs chromium chromium-driver"
fi
if [ -n "$debs" ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    echo "setup-extras: installing Debian packages:$debs"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
        --no-install-recommends $debs >/dev/null; } ||
        echo "setup-extras: could not install$debs; the tests that need them will skip"
fi

for pkg in pyarrow duckdb HolisticTraceAnalysis selenium mcp fastapi uvicorn; do
    mod=$pkg
    [ "$pkg" = HolisticTraceAnalysis ] && mod=hta
    if [ -x "$VPY" ] && ! $VPY -c "import $mod" 2>/dev/null; then
        echo "setup-extras: installing $pkg into .venv"
        $VPY -m pip install -q "$pkg" ||
            echo "setup-extras: $pkg could not be installed; the tests that need it will skip"
    fi
done
exit 0
