#!/usr/bin/env bash
# Installs what the browser tests of the web view need (tests/integration/test_ui.py):
# Debian's chromium and chromium-driver, and Selenium from PyPI into .venv. Run by setup.sh;
# PROBING_SETUP_BROWSER=0 skips it. Failing here is not fatal: the browser tests then skip and
# say why.
set -uo pipefail
cd "$(dirname "$0")/.."
[ "${PROBING_SETUP_BROWSER:-1}" = 0 ] && exit 0
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    echo "setup: installing chromium and chromium-driver (browser tests of the web view)"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
        chromium chromium-driver >/dev/null; } ||
        echo "setup: could not install chromium; the browser tests will skip"
fi
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import selenium" 2>/dev/null; then
    .venv/bin/python -m pip install -q "selenium>=4.10" ||
        echo "setup: could not install selenium; the browser tests will skip"
fi
exit 0
