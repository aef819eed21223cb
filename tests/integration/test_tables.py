"""`probing <target> tables` and the rings behind the tables: columns, row counts, capacity, and
what happens when a ring is full (the oldest rows go, the drop count says how many)."""
import json

from conftest import api_get, example_file

TORCH_TRACE_COLUMNS = ["step", "seq", "module", "type", "stage", "duration", "total_duration",
                       "time_offset", "allocated", "max_allocated", "depth", "thread", "rank"]


def find_table(tables, schema, name):
    for t in tables:
        if t["schema"] == schema and t["name"] == name:
            return t
    raise AssertionError(f"{schema}.{name} not in {[(t['schema'], t['name']) for t in tables]}")


def test_tables_command_lists_torch_trace(cli, resnet_run):
    out = cli(resnet_run.target(), "tables").stdout
    rows = cli.scalar(resnet_run.target(), "SELECT COUNT(*) FROM python.torch_trace")
    assert "python.torch_trace" in out
    assert "python.nccl_trace" in out
    for column in TORCH_TRACE_COLUMNS:
        assert column in out, f"column {column} not shown:\n{out}"
    assert str(rows) in out
    assert "capacity" in out.lower() and "dropped" in out.lower()


def test_tables_api_matches_query(cli, resnet_run):
    status, body = api_get(resnet_run.socket_path, "/api/tables")
    assert status == 200
    trace = find_table(body["tables"], "python", "torch_trace")
    assert [c["name"] for c in trace["columns"]] == TORCH_TRACE_COLUMNS
    types = {c["name"]: c["type"].upper() for c in trace["columns"]}
    assert types["step"] == "INTEGER" and types["module"] == "TEXT"
    assert types["duration"] == "REAL" and types["allocated"] == "REAL"
    assert trace["rows"] == cli.scalar(resnet_run.target(),
                                       "SELECT COUNT(*) FROM python.torch_trace")
    assert trace["rows_dropped"] == 0
    assert trace["capacity"] >= trace["rows"] > 0
    nccl = find_table(body["tables"], "python", "nccl_trace")
    assert nccl["rows"] == 0


def test_declared_types_are_the_values_types(cli, resnet_run):
    rows = cli.query(resnet_run.target(), "SELECT " + ", ".join(
        f"typeof({c}) AS {c}" for c in TORCH_TRACE_COLUMNS) + " FROM python.torch_trace "
        "GROUP BY " + ", ".join(str(i + 1) for i in range(len(TORCH_TRACE_COLUMNS))))
    expected = {"step": "integer", "seq": "integer", "module": "text", "type": "text",
                "stage": "text", "duration": "real", "total_duration": "real",
                "time_offset": "real", "allocated": "real",
                "max_allocated": "real", "depth": "integer", "thread": "integer",
                "rank": "integer"}
    assert rows == [expected]


def test_small_ring_drops_oldest_rows(cli, traced, env):
    """With PROBING_RING_ROWS=64 a few steps of 270 modules overflow the ring many times."""
    t = traced("many_modules.py", "--steps", 5, env=dict(env, PROBING_RING_ROWS="64"))
    t.wait_holding()
    status, body = api_get(t.socket_path, "/api/tables")
    trace = find_table(body["tables"], "python", "torch_trace")
    assert trace["capacity"] == 64
    assert trace["rows"] == 64
    assert trace["rows_dropped"] > 0
    assert cli.scalar(t.target(), "SELECT COUNT(*) FROM python.torch_trace") == 64
    # the rows kept are the newest: they are from the last step
    assert cli.scalar(t.target(), "SELECT MIN(step) = MAX(step) FROM python.torch_trace") == 1
    # the CLI shows the same numbers
    out = cli(t.target(), "tables").stdout
    assert str(trace["rows_dropped"]) in out
    # queries still work
    rows = cli.query(t.target(), example_file("slowest-modules.sql"))
    assert len(rows) == 5
    # the setting is visible in probe.config
    config = json.dumps(cli.query(t.target(), "SELECT * FROM probe.config"))
    assert "PROBING_RING_ROWS" in config and "64" in config
    t.finish()


def test_probe_schema(cli, resnet_run):
    tables = json.dumps(cli.query(resnet_run.target(), "SELECT * FROM probe.tables"))
    assert "torch_trace" in tables and "nccl_trace" in tables
    config = cli.query(resnet_run.target(), "SELECT * FROM probe.config")
    text = json.dumps(config)
    for name in ("PROBING_RING_ROWS", "PROBING_MAX_RESULT_MB", "PROBING_EVAL_TIMEOUT"):
        assert name in text


def test_sql_features_work(cli, resnet_run):
    """Window functions, CTEs and JSON functions, as the issue promises."""
    target = resnet_run.target()
    rows = cli.query(target, """
        WITH per_step AS (
            SELECT step, SUM(duration) AS d FROM python.torch_trace GROUP BY step)
        SELECT step, d, RANK() OVER (ORDER BY d DESC) AS r,
               json_object('step', step) AS j
        FROM per_step ORDER BY r LIMIT 3""")
    assert [r["r"] for r in rows] == [1, 2, 3]
    assert json.loads(rows[0]["j"]) == {"step": rows[0]["step"]}
