#!/usr/bin/env bash
# Whether `probing <recording> report` of this working tree is byte-identical to that of another
# commit (default HEAD): the proof for a change to src/report, or to the CLI around it, that must
# not change what a user reads (a restructuring, a rename).
#
#   bash scripts/report_identical.sh [REF]      # after `make build`; about a minute of CPU
#
# How: builds REF's `probing` in a temporary git worktree, records the test workloads once with
# this tree's build (`probing run -o`: a plain loop, a data-bound one, AMP with a skipped step and
# growing memory, tiny modules, a leak, an oversized optimizer, periodic checkpoints, a GIL-holding
# thread, a 2-rank DDP job with a slow rank), then reads every recording with both binaries:
# `report --json`, the text report, `report --json --last 8`, and the two ranks together. The
# same files are read by both, so the timings of the recordings do not matter. It compares
# reports of real runs only; the rules' other branches (CUDA, older agents) are the unit tests'
# (tests/unit/test_report*.c).
# Exits 0 when every output is identical, 1 with the diff when one differs, 2 when it cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:-HEAD}
here=$(pwd)
new=$here/build/src/cli/probing
py=$here/.venv/bin/python
if [ ! -x "$new" ] || [ ! -x "$py" ] || [ ! -x .venv/bin/meson ]; then
    echo "report_identical: needs .venv (bash scripts/setup.sh) and a build (make build)" >&2
    exit 2
fi
if ! git rev-parse --verify -q "$ref^{commit}" >/dev/null; then
    echo "report_identical: '$ref' is not a commit of this repository" >&2
    exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/probing-report-identical.XXXXXX")
cleanup() {
    git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

echo "report_identical: building $(git rev-parse --short "$ref")'s probing"
git worktree add --detach -q "$tmp/base" "$ref"
.venv/bin/meson setup "$tmp/base-build" "$tmp/base" >"$tmp/meson.log" 2>&1 ||
    { cat "$tmp/meson.log" >&2; exit 2; }
.venv/bin/ninja -C "$tmp/base-build" src/cli/probing >"$tmp/ninja.log" 2>&1 ||
    { cat "$tmp/ninja.log" >&2; exit 2; }
old=$tmp/base-build/src/cli/probing

echo "report_identical: recording the workloads"
export PATH=$here/.venv/bin:$PATH PROBING_DIR=$tmp/sockets
mkdir -m 700 "$tmp/sockets" "$tmp/rec"
w=$here/tests/workloads
record() { # name, then the command
    local name=$1
    shift
    "$new" run -o "$tmp/rec/$name.db" -- "$@" >"$tmp/rec/$name.log" 2>&1 ||
        { echo "report_identical: recording $name failed:" >&2; cat "$tmp/rec/$name.log" >&2; exit 2; }
}
record healthy "$py" "$w/planted.py" --case healthy --steps 30 --print-every 10
record slow_data "$py" "$w/planted.py" --case slow_data --steps 30 --print-every 10
record big_optimizer "$py" "$w/planted.py" --case big_optimizer --steps 20 --print-every 10
record tiny_modules "$py" "$w/planted.py" --case tiny_modules --steps 20 --print-every 10
record leak "$py" "$w/planted.py" --case leak --steps 30 --print-every 10
record amp "$py" "$w/data_amp.py" --steps 30 --amp --inf-at 10 --grow-mb 4 --print-every 10
record checkpoint "$py" "$w/loop_causes.py" --case checkpoint --steps 40
record gil_thread "$py" "$w/loop_causes.py" --case gil_thread --steps 30
record ddp "$here/.venv/bin/torchrun" --nproc_per_node 2 "$w/ddp_gloo.py" --steps 20 \
    --slow-rank 1 --slow-ms 20

reports() { # binary, output directory
    local bin=$1 out=$2 db
    mkdir -p "$out"
    for db in "$tmp"/rec/*.db; do
        db=$(basename "$db" .db)
        "$bin" "$tmp/rec/$db.db" report --json >"$out/$db.json" 2>&1 || echo "exit $?" >>"$out/$db.json"
        "$bin" "$tmp/rec/$db.db" report >"$out/$db.txt" 2>&1 || echo "exit $?" >>"$out/$db.txt"
        "$bin" "$tmp/rec/$db.db" report --json --last 8 >"$out/$db.last8.json" 2>&1 ||
            echo "exit $?" >>"$out/$db.last8.json"
    done
    "$bin" "$tmp/rec/ddp.rank0.db" report --json "$tmp/rec/ddp.rank1.db" >"$out/ddp.ranks.json" 2>&1 ||
        echo "exit $?" >>"$out/ddp.ranks.json"
    "$bin" "$tmp/rec/ddp.rank1.db" report "$tmp/rec/ddp.rank0.db" >"$out/ddp.ranks.txt" 2>&1 ||
        echo "exit $?" >>"$out/ddp.ranks.txt"
}
reports "$old" "$tmp/old"
reports "$new" "$tmp/new"
n=$(ls "$tmp/new" | wc -l)
if diff -r "$tmp/old" "$tmp/new"; then
    echo "report_identical: $n reports of $(ls "$tmp"/rec/*.db | wc -l) recordings are byte-identical to $ref's"
else
    echo "report_identical: the reports differ from $ref's (diff above: < $ref, > this tree)" >&2
    exit 1
fi
