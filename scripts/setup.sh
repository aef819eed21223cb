#!/usr/bin/env bash
# Installs what probing needs and is missing, then builds and installs probing into .venv.
#   - Debian packages: a C compiler, pkg-config, SQLite, libmicrohttpd, jansson, libcurl,
#     libunwind (dev); iproute2 (the `ip netns` of the two-node tests, tests/integration/test_cluster.py)
#   - .venv (Python 3.9+) with torch==2.13.0 (CPU), meson-python, pytest
#   - probing itself: `pip install .` (the C agent, the `probing` command, the Python package)
# Idempotent: a second run only rebuilds probing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
DEBS="build-essential pkg-config libsqlite3-dev libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev libunwind-dev iproute2"
missing=""
for p in $DEBS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    echo "setup: installing Debian packages:$missing"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    "$PY" -m venv .venv
fi
VPY=.venv/bin/python
# meson-python runs the `meson` it finds on PATH; without build isolation that is the one in .venv
export PATH="$(pwd)/.venv/bin:$PATH"
if ! $VPY -c "import torch" 2>/dev/null; then
    echo "setup: installing torch==2.13.0 (CPU) into .venv"
    $VPY -m pip install -q torch==2.13.0
fi
# pytest-xdist: scripts/sanitize.sh runs the integration suite under ASan on both cores
$VPY -m pip install -q "meson-python>=0.15" "meson>=1.1" ninja pytest pytest-xdist numpy
# tests/realworld also trains Hugging Face's own GPT-2 (pure Python, no torch requirement of its
# own, so the CPU torch stays); without it that one test is skipped. torchvision is not
# installed: its PyPI wheel for torch 2.13 is built against the CUDA torch and does not import
# with the CPU one, so the suite carries a faithful copy of ResNet's BasicBlock instead.
if ! $VPY -c "import transformers" 2>/dev/null; then
    $VPY -m pip install -q transformers || echo "setup: transformers not installed; tests/realworld skips its Hugging Face test"
fi
# PyTorch Lightning and Hugging Face accelerate: the real frameworks of
# tests/realworld/test_frameworks.py (skipped with the reason when missing)
for pkg in lightning accelerate; do
    if ! $VPY -c "import $pkg" 2>/dev/null; then
        $VPY -m pip install -q "$pkg" || echo "setup: $pkg not installed; tests/realworld/test_frameworks.py skips its $pkg tests"
    fi
done
echo "setup: building and installing probing"
# The install builds in build/, the development tree that `make build`, the unit tests and
# `make lint` use (meson-python keeps a build-dir and reconfigures it when it is there), so the
# project, and the C++ shim against torch's headers, compile once, not twice. Under CI (CI=true)
# a C warning is an error (meson option werror_ci); scripts/sanitize.sh does the same with clang.
# The C unit tests are built there too (a wheel has none: pyproject.toml turns them off).
OPTS=(-Csetup-args=-Dunit_tests=true)
[ "${CI:-}" = true ] && OPTS+=(-Csetup-args=-Dwerror_ci=true)
$VPY -m pip install -q --no-build-isolation --force-reinstall --no-deps -Cbuild-dir="$(pwd)/build" \
    "${OPTS[@]}" .
echo "setup: done. probing is $(pwd)/.venv/bin/probing"
