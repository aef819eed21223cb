"""Writes the tables fetched by `probing <target...> export --parquet DIR` as Parquet files.

Run by the C command (src/cli/cmd_export.c) as a script, never imported by the agent:

    python3 _export.py DIR TARGET.json [TARGET.json ...]

Each TARGET.json describes what the command fetched from one live process or recording:
{"target", "info" (its /api/info), "host", "tables": [{"schema", "name", "columns": [{"name",
"type"}...], "rows_file" (newline-delimited JSON objects, one per row), "rows" (their count)}]}. For each one this writes DIR/rank<R>-pid<P>/<name>.parquet
with pyarrow (Arrow's own Parquet writer): the declared SQL types become int64, float64 or string
columns, `time` columns (unix seconds) become UTC timestamps in microseconds, and the columns
job, rank, host and pid are added where the table lacks them, so that

    SELECT rank, AVG(wall) FROM read_parquet('DIR/*/steps.parquet') GROUP BY rank

works in DuckDB over hundreds of ranks or runs.
"""
import json
import os
import sys

TYPES = {"INTEGER": "int64", "REAL": "float64", "TEXT": "string", "BLOB": "binary"}


def fail(message):
    sys.stderr.write("probing: %s\n" % message)
    sys.exit(1)


def arrow_type(pa, declared):
    return getattr(pa, TYPES.get((declared or "").upper(), "string"))()


def read_rows(pa, pj, table):
    """The staged rows of one table as an Arrow table with the declared types (pyarrow's JSON
    reader streams the newline-delimited file; values of REAL columns that are whole numbers in
    JSON are read as doubles, as declared)."""
    fields = [pa.field(c.get("name"), arrow_type(pa, c.get("type")))
              for c in table.get("columns") or []]
    schema = pa.schema(fields)
    if not table.get("rows"):
        return schema.empty_table()
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    return pj.read_json(table["rows_file"], parse_options=options).select(
        [f.name for f in fields])


def write_target(pa, pj, pq, out_dir, doc):
    info = doc.get("info") or {}
    rank = info.get("rank")
    rank = int(rank) if isinstance(rank, int) else 0
    pid = int(info.get("pid") or 0)
    job = info.get("job") or ""
    host = doc.get("host") or ""
    sub = os.path.join(out_dir, "rank%d-pid%d" % (rank, pid))
    os.makedirs(sub, exist_ok=True)
    written = []
    for table in doc.get("tables", []):
        data = read_rows(pa, pj, table)
        n = data.num_rows
        if "time" in data.column_names and data.schema.field("time").type == pa.float64():
            seconds = data.column("time").to_pylist()
            stamps = pa.array([None if v is None else int(round(v * 1e6)) for v in seconds],
                              pa.int64()).cast(pa.timestamp("us", tz="UTC"))
            data = data.set_column(data.column_names.index("time"),
                                   pa.field("time", pa.timestamp("us", tz="UTC")), stamps)
        for name, value, kind in (("job", job, pa.string()), ("rank", rank, pa.int64()),
                                  ("host", host, pa.string()), ("pid", pid, pa.int64())):
            if name not in data.column_names:
                data = data.append_column(pa.field(name, kind), pa.array([value] * n, kind))
        data = data.replace_schema_metadata({
            "probing.table": "%s.%s" % (table.get("schema"), table.get("name")),
            "probing.target": str(doc.get("target", "")),
            "probing.info": json.dumps(info)})
        path = os.path.join(sub, "%s.parquet" % table.get("name"))
        pq.write_table(data, path)
        written.append((table.get("name"), n))
    return sub, written


def main(argv):
    if len(argv) < 3:
        fail("usage: _export.py DIR TARGET.json [TARGET.json ...] (run by probing export)")
    try:
        import pyarrow as pa
        import pyarrow.json as pj
        import pyarrow.parquet as pq
    except ImportError:
        fail("export --parquet needs pyarrow in %s: pip install pyarrow (or set PROBING_PYTHON "
             "to a Python that has it)" % sys.executable)
    out_dir = argv[1]
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        fail("--parquet %s: that is a file, not a directory; give a directory (it is created "
             "when missing)" % out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        fail("cannot create %s: %s" % (out_dir, e.strerror))
    for path in argv[2:]:
        with open(path) as f:
            doc = json.load(f)
        try:
            sub, written = write_target(pa, pj, pq, out_dir, doc)
        except OSError as e:
            fail("cannot write the Parquet files of %s: %s" % (doc.get("target"), e))
        total = sum(n for _, n in written)
        print("%s: %d tables, %d rows -> %s/" % (doc.get("target"), len(written), total, sub))


if __name__ == "__main__":
    main(sys.argv)
