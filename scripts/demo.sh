#!/usr/bin/env bash
# The main job: a real training run under probing, then what probing saw, from the outside,
# ending with the four-phase report.
# Run through `make demo` (which installs everything first and puts .venv/bin on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v probing >/dev/null || { echo "demo: probing is not on PATH (run 'make demo')" >&2; exit 1; }
PY=${PYTHON:-python}
export PROBING_DIR=${PROBING_DIR:-$(mktemp -d /tmp/pbdemo.XXXX)}
hold=$(mktemp -u /tmp/pbdemo-hold.XXXX)
log=$(mktemp /tmp/pbdemo-log.XXXX)
trap 'touch "$hold"; rm -f "$log"' EXIT

echo "== training a small transformer for 250 steps under probing"
echo "   \$ probing run -- $PY tests/workloads/transformer.py --steps 250"
probing run -- "$PY" -u tests/workloads/transformer.py --steps 250 --print-every 50 --hold-file "$hold" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
    grep -q HOLDING "$log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "demo: training exited early" >&2; exit 1; }
    sleep 0.2
done
cat "$log"

run() { echo; echo "\$ probing $pid $*"; probing "$pid" "$@"; }
run tables
run query "
SELECT
    module,
    stage,
    COUNT(*) as executions,
    AVG(duration) as avg_time_sec,
    SUM(duration) as total_time_sec,
    SUM(duration) * 100.0 / SUM(SUM(duration)) OVER () as pct_time
FROM python.torch_trace
WHERE step > (SELECT MAX(step) - 10 FROM python.torch_trace)
GROUP BY module, stage
ORDER BY total_time_sec DESC
LIMIT 15"
run query "
SELECT
    step,
    SUM(CASE WHEN stage = 'forward' THEN duration ELSE 0 END) as forward_time,
    SUM(CASE WHEN stage = 'backward' THEN duration ELSE 0 END) as backward_time,
    SUM(CASE WHEN stage = 'step' THEN duration ELSE 0 END) as optimizer_time
FROM python.torch_trace
WHERE step > (SELECT MAX(step) - 5 FROM python.torch_trace)
GROUP BY step
ORDER BY step"
run query "
SELECT
    module,
    AVG(duration) as avg_time,
    AVG(allocated) as avg_memory
FROM python.torch_trace
WHERE module LIKE '%attention%' OR module LIKE '%attn%'
GROUP BY module
ORDER BY avg_time DESC"
run eval "print(f'Num workers: {train_loader.num_workers}'); print(f'batch size: {batch_size}')"
run report
touch "$hold"
wait "$pid" || true
