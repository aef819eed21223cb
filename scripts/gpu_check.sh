#!/usr/bin/env bash
# gpu_check.sh - device time checked on one CUDA GPU (docs/tables.md, "Device time"): builds
# probing unless PROBING_BIN and PROBING_PYTHONPATH name a build, runs tests/gpu/gpu_check.py
# (losses identical with and without probing, device times against torch.cuda.Event, module sums,
# GPU-bound / launch-bound verdicts, the device wait behind .item(), a one-rank NCCL all-reduce,
# system.gpu from NVML, the step time against plain) and writes its figures to
# ${GPU_CHECK_OUT:-gpu_check.json}. About 4 minutes on an H100/H200 (GPU_CHECK_QUICK=1: about
# 2, without the overhead runs); at most 8.
# On a machine without CUDA it says so and exits 0 at once. CI never has a GPU.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no CUDA device here (torch.cuda.is_available() is not True): nothing to check"
    exit 0
fi
OUT_FILE=${GPU_CHECK_OUT:-gpu_check.json}
WORK=${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
if [ -z "${PROBING_BIN:-}" ] || [ -z "${PROBING_PYTHONPATH:-}" ]; then
    BUILD=${GPU_CHECK_BUILD:-build-gpu}
    if [ ! -f "$BUILD/build.ninja" ]; then
        "$PY" -m mesonbuild.mesonmain setup "$BUILD" >"$WORK/setup.log" 2>&1 || { tail -40 "$WORK/setup.log"; echo "gpu_check: meson setup failed"; exit 1; }
    fi
    ninja -C "$BUILD" >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; echo "gpu_check: build failed"; exit 1; }
    PROBING_BIN=$PWD/$BUILD/src/cli/probing
    PROBING_PYTHONPATH=$PWD/$BUILD/python
fi
timeout 420 "$PY" tests/gpu/gpu_check.py --probing "$PROBING_BIN" --pythonpath "$PROBING_PYTHONPATH" \
    --out "$OUT_FILE" --work "$WORK" ${GPU_CHECK_QUICK:+--quick}
