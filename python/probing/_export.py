"""Writes the tables fetched by `probing <target...> export --parquet DIR` as Parquet files.

Run by the C command (src/cli/cmd_export.c) as a script, never imported by the agent:

    python3 _export.py DIR TARGET.json [TARGET.json ...]

Each TARGET.json is what the command fetched from one live process or recording:
{"target", "info" (its /api/info), "host", "tables": [{"schema", "name", "columns": [{"name",
"type"}...], "rows": [[...], ...]}]}. For each one this writes DIR/rank<R>-pid<P>/<name>.parquet
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


def write_target(pa, pq, out_dir, doc):
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
        columns = table.get("columns") or []
        rows = table.get("rows") or []
        names = [c.get("name") for c in columns]
        arrays, fields = [], []
        for i, column in enumerate(columns):
            name = column.get("name")
            values = [r[i] if i < len(r) else None for r in rows]
            kind = arrow_type(pa, column.get("type"))
            if name == "time" and kind == pa.float64():
                arrays.append(pa.array([None if v is None else int(round(v * 1e6)) for v in values],
                                       pa.int64()).cast(pa.timestamp("us", tz="UTC")))
                fields.append(pa.field(name, pa.timestamp("us", tz="UTC")))
                continue
            if kind == pa.int64():
                values = [None if v is None else int(v) for v in values]
            elif kind == pa.float64():
                values = [None if v is None else float(v) for v in values]
            elif kind == pa.string():
                values = [None if v is None else (v if isinstance(v, str) else json.dumps(v))
                          for v in values]
            arrays.append(pa.array(values, kind))
            fields.append(pa.field(name, kind))
        for name, value, kind in (("job", job, pa.string()), ("rank", rank, pa.int64()),
                                  ("host", host, pa.string()), ("pid", pid, pa.int64())):
            if name not in names:
                arrays.append(pa.array([value] * len(rows), kind))
                fields.append(pa.field(name, kind))
        schema = pa.schema(fields, metadata={
            "probing.table": "%s.%s" % (table.get("schema"), table.get("name")),
            "probing.target": str(doc.get("target", "")),
            "probing.info": json.dumps(info)})
        path = os.path.join(sub, "%s.parquet" % table.get("name"))
        pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path)
        written.append((table.get("name"), len(rows)))
    return sub, written


def main(argv):
    if len(argv) < 3:
        fail("usage: _export.py DIR TARGET.json [TARGET.json ...] (run by probing export)")
    try:
        import pyarrow as pa
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
            sub, written = write_target(pa, pq, out_dir, doc)
        except OSError as e:
            fail("cannot write the Parquet files of %s: %s" % (doc.get("target"), e))
        total = sum(n for _, n in written)
        print("%s: %d tables, %d rows -> %s/" % (doc.get("target"), len(written), total, sub))


if __name__ == "__main__":
    main(sys.argv)
