"""Writes the tables fetched by `probing <target...> export --parquet DIR` as Parquet files.

Run by the C command (src/cli/cmd/cmd_export.c) as a script, never imported by the agent:

    python3 _export.py [--force] DIR TARGET.json [TARGET.json ...]

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
import re
import sys

# What the C command lets through (cmd_export.c, table_name_ok); checked again here because this
# name becomes a file name: nothing may be written outside DIR.
TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")

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


def target_dir(out_dir, doc):
    info = doc.get("info") or {}
    rank = info.get("rank")
    rank = int(rank) if isinstance(rank, int) else 0
    pid = info.get("pid")
    pid = int(pid) if isinstance(pid, int) else 0
    return os.path.join(out_dir, "rank%d-pid%d" % (rank, pid))


def planned_paths(out_dir, doc):
    """[(table, path)] of one target; fails on a name that is not a table name or a path that
    would leave DIR (a symbolic link among its directories)."""
    sub = target_dir(out_dir, doc)
    root = os.path.realpath(out_dir)
    out = []
    for table in doc.get("tables", []):
        name = table.get("name")
        if not isinstance(name, str) or not TABLE_NAME.match(name):
            fail("refusing to export the table %r of %s: not a table name" %
                 (name, doc.get("target")))
        path = os.path.join(sub, "%s.parquet" % name)
        if os.path.commonpath([root, os.path.realpath(path)]) != root:
            fail("refusing to write %s: it leads outside %s (a symbolic link?)" % (path, out_dir))
        out.append((table, path))
    return out


def write_target(pa, pj, pq, out_dir, doc, planned):
    info = doc.get("info") or {}
    rank = info.get("rank")
    rank = int(rank) if isinstance(rank, int) else 0
    pid = int(info.get("pid") or 0)
    job = info.get("job") or ""
    host = doc.get("host") or ""
    sub = target_dir(out_dir, doc)
    os.makedirs(sub, exist_ok=True)
    written = []
    for table, path in planned:
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
        if os.path.lexists(path):  # --force: replace the file itself, never follow a link
            os.unlink(path)
        pq.write_table(data, path)
        written.append((table.get("name"), n))
    return sub, written


def main(argv):
    force = len(argv) > 1 and argv[1] == "--force"
    if force:
        argv = argv[:1] + argv[2:]
    if len(argv) < 3:
        fail("usage: _export.py [--force] DIR TARGET.json [TARGET.json ...] (run by probing "
             "export)")
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
    docs = []
    for path in argv[2:]:
        with open(path) as f:
            docs.append(json.load(f))
    # Every path is checked before the first file is written: a refusal writes nothing.
    plans = [planned_paths(out_dir, doc) for doc in docs]
    every = [p for plan in plans for _, p in plan]
    if len(set(every)) != len(every):
        fail("two targets would write the same files (the same rank and pid): export them "
             "to different directories")
    existing = [p for p in every if os.path.lexists(p)]
    if existing and not force:
        fail("%s exists%s; nothing was written: give another directory, or --force to replace "
             "them" % (existing[0], " (and %d other files)" % (len(existing) - 1)
                       if len(existing) > 1 else ""))
    for doc, plan in zip(docs, plans):
        try:
            sub, written = write_target(pa, pj, pq, out_dir, doc, plan)
        except OSError as e:
            fail("cannot write the Parquet files of %s: %s" % (doc.get("target"), e))
        total = sum(n for _, n in written)
        print("%s: %d tables, %d rows -> %s/" % (doc.get("target"), len(written), total, sub))


if __name__ == "__main__":
    main(sys.argv)
