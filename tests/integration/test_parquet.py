"""`probing <target-or-recording...> export --parquet DIR`: every table as Parquet (pyarrow), read
back by DuckDB with a glob, as docs/exporter.md tells users to.

The seed's "overall profile" query, run by DuckDB over the export of a live 2-rank gloo job and
grouped by rank, must give the numbers `probing query` gives on each rank; two recordings
exported at once land in two folders with their own rows; `time` columns are absolute.
"""
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PYTHON, STEP_TIMEOUT_S, WORKLOADS, start_torchrun_job

duckdb = pytest.importorskip("duckdb", reason="DuckDB is not installed (pip install duckdb; "
                                               "scripts/setup-extras.sh installs it)")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install pyarrow; "
                                      "scripts/setup-extras.sh installs it)")

# Seed query 01 ("overall profile"), without its LIMIT so every (module, stage) is compared.
OVERALL_PROFILE = """
SELECT module, stage, COUNT(*) as executions, AVG(duration) as avg_time_sec,
       SUM(duration) as total_time_sec,
       SUM(duration) * 100.0 / SUM(SUM(duration)) OVER () as pct_time
FROM python.torch_trace
WHERE step > (SELECT MAX(step) - 10 FROM python.torch_trace)
GROUP BY module, stage
"""

# The same question over every rank's Parquet file at once, per rank.
OVERALL_PROFILE_BY_RANK = """
SELECT rank, module, stage, COUNT(*) as executions, AVG(duration) as avg_time_sec,
       SUM(duration) as total_time_sec,
       SUM(duration) * 100.0 / SUM(SUM(duration)) OVER (PARTITION BY rank) as pct_time
FROM read_parquet('{dir}/*/torch_trace.parquet') t
WHERE step > (SELECT MAX(step) - 10 FROM read_parquet('{dir}/*/torch_trace.parquet') u
              WHERE u.rank = t.rank)
GROUP BY rank, module, stage
"""


def sql(query):
    """All rows of a DuckDB query (a fresh in-memory database each time)."""
    with duckdb.connect() as con:
        return con.execute(query).fetchall()



@pytest.fixture(scope="module")
def job(cli, env, session_dir):
    """A 2-rank torchrun job of ddp_gloo.py held at the end: {rank: pid}."""
    proc, ranks, release = start_torchrun_job(cli, env, session_dir, "parquet-job", 12)
    try:
        assert sorted(ranks) == [0, 1], ranks
        yield ranks
    finally:
        release()


def test_overall_profile_by_rank_equals_probing(cli, job, tmp_path):
    out = tmp_path / "pq"
    r = cli(job[0], job[1], "export", "--parquet", out)
    for rank, pid in job.items():
        assert f"{pid}: " in r.stdout and f"rank{rank}-pid{pid}" in r.stdout
    assert sorted(p.name for p in out.iterdir()) == [f"rank0-pid{job[0]}", f"rank1-pid{job[1]}"]
    got = sql(OVERALL_PROFILE_BY_RANK.format(dir=out))
    by_rank = {}
    for rank, module, stage, executions, avg, total, pct in got:
        by_rank.setdefault(rank, {})[(module, stage)] = (executions, avg, total, pct)
    assert sorted(by_rank) == [0, 1]
    for rank, pid in job.items():
        want = {(row["module"], row["stage"]): row for row in cli.query(pid, OVERALL_PROFILE)}
        assert set(by_rank[rank]) == set(want)
        for key, (executions, avg, total, pct) in by_rank[rank].items():
            assert executions == want[key]["executions"]
            assert avg == pytest.approx(want[key]["avg_time_sec"], rel=1e-9)
            assert total == pytest.approx(want[key]["total_time_sec"], rel=1e-9)
            assert pct == pytest.approx(want[key]["pct_time"], rel=1e-9)


def test_steps_keep_their_types_and_gain_job_columns(cli, job, tmp_path):
    out = tmp_path / "pq"
    cli(job[0], job[1], "export", "--parquet", out)
    types = dict(sql(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM "
                            f"read_parquet('{out}/*/steps.parquet'))"))
    assert types["step"] == "BIGINT" and types["wall"] == "DOUBLE"
    assert types["job"] == "VARCHAR" and types["host"] == "VARCHAR" and types["rank"] == "BIGINT"
    rows = sql(f"SELECT rank, COUNT(*), SUM(wall), MIN(job), MAX(job), MIN(pid) FROM "
                      f"read_parquet('{out}/*/steps.parquet') GROUP BY rank ORDER BY rank"
                      )
    info = json.loads(cli(job[0], "info", "-f", "json").stdout)
    for rank, count, wall, job_min, job_max, pid in rows:
        want = cli.query(job[rank], "SELECT COUNT(*) AS n, SUM(wall) AS s FROM python.steps")[0]
        assert count == want["n"] and wall == pytest.approx(want["s"], rel=1e-9)
        assert job_min == job_max == info["job"] and str(pid) == job[rank]


@pytest.fixture(scope="module")
def recordings(cli, session_dir):
    """Two recordings of transformer.py (3 and 5 steps) and the wall-clock span they ran in."""
    paths = []
    t0 = time.time()
    for name, steps in (("a", 3), ("b", 5)):
        path = session_dir / f"parquet-{name}.db"
        cli("run", "-o", path, "--", PYTHON, WORKLOADS / "transformer.py", "--steps", steps,
            "--print-every", 0, timeout=STEP_TIMEOUT_S)
        paths.append(path)
    return paths, t0, time.time()


def test_several_recordings_with_absolute_times(cli, recordings, tmp_path):
    recordings, t0, t1 = recordings
    out = tmp_path / "pq"
    cli(recordings[0], recordings[1], "export", "--parquet", out)
    runs = sorted(out.iterdir())
    assert len(runs) == 2
    counts = sorted(sql(f"SELECT pid, COUNT(*) FROM read_parquet('{out}/*/steps.parquet') "
                               f"GROUP BY pid"), key=lambda r: r[1])
    assert [c for _, c in counts] == [cli.scalar(p, "SELECT COUNT(*) FROM python.steps")
                                      for p in recordings]
    # The agent's host is in its info, so a recording says where it ran wherever it is read.
    assert sql(f"SELECT DISTINCT host FROM read_parquet('{out}/*/steps.parquet')") == [
        (socket.gethostname(),)]
    [(first, last)] = sql(f"SELECT epoch(MIN(time)), epoch(MAX(time)) FROM "
                          f"read_parquet('{out}/*/process.parquet')")
    assert t0 - 5 <= first <= last <= t1 + 5


def test_export_needs_a_directory(cli, recordings):
    rec = recordings[0][0]
    r = cli(rec, "export", check=False)
    assert r.returncode == 2
    assert r.stderr == f"probing: export needs --parquet DIR: probing {rec} export --parquet DIR\n"
    r = cli(rec, rec, "query", "SELECT 1", check=False)
    assert r.returncode == 2
    assert r.stderr == "probing: query takes one target, not 2; only export takes several\n"


def test_export_without_pyarrow_says_what_to_install(cli, env, recordings, tmp_path):
    bare = "/usr/bin/python3"
    if not Path(bare).exists() or subprocess.run([bare, "-c", "import pyarrow"],
                                                 capture_output=True).returncode == 0:
        pytest.skip(f"needs a Python without pyarrow ({bare} has it or is missing)")
    rec = recordings[0][0]
    r = cli(rec, "export", "--parquet", tmp_path / "pq", check=False,
            env={**env, "PROBING_PYTHON": bare})
    assert r.returncode == 1
    assert r.stderr == (f"probing: export --parquet needs pyarrow in {bare}: pip install pyarrow "
                        "(or set PROBING_PYTHON to a Python that has it)\n")
    assert not (tmp_path / "pq").exists()


def test_export_into_a_file_is_refused(cli, recordings, tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("keep me")
    r = cli(recordings[0][0], "export", "--parquet", target, check=False)
    assert r.returncode == 1
    assert r.stderr == (f"probing: --parquet {target}: that is a file, not a directory; give a "
                        "directory (it is created when missing)\n")
    assert target.read_text() == "keep me"
