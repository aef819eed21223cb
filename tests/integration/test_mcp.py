"""`probing mcp`: the Model Context Protocol server over stdio (docs/mcp.md), driven by the
official MCP Python SDK (PyPI `mcp`) as a real client against a live traced job, and by raw
JSON-RPC lines for what a well-behaved client never sends (malformed JSON, unknown methods, a
line over the 4 MiB cap, a client that cancels or disconnects mid-call).

One job serves the whole file: planted.py's slow_data case (a Dataset that sleeps: the report's
primary finding is data_bound), finished and holding. The tests that leave an eval sleeping in
it come last, since the agent runs one eval at a time.
"""
import json
import os
import select
import subprocess
import time

import pytest

try:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client
    SDK_MISSING = None
except ImportError as e:  # the SDK is an optional test dependency
    SDK_MISSING = f"the MCP Python SDK cannot be imported ({e}): pip install mcp"

needs_sdk = pytest.mark.skipif(SDK_MISSING is not None, reason=SDK_MISSING or "")

READ_TOOLS = {"list_targets", "query", "report", "tables", "info", "backtrace", "hang",
              "stragglers", "ranks", "compare"}
ANSWER_TIMEOUT_S = 60  # one answer of the server (a report reads the whole job)


@pytest.fixture(scope="module")
def job(session_launcher):
    t = session_launcher.traced("planted.py", "--case", "slow_data", "--steps", 30,
                                "--print-every", 10)
    t.wait_holding()
    yield t
    t.kill()


# ----------------------------------------------------------------------------- the SDK client


def sdk_session(cli, args, body):
    """Runs `await body(session)` in a ClientSession over stdio to `probing mcp ARGS`, after
    initialize; returns (initialize result, body's result)."""
    params = StdioServerParameters(command=cli.binary, args=["mcp", *args],
                                   env={"PROBING_DIR": cli.env["PROBING_DIR"]})

    async def main():
        with anyio.fail_after(120):
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    return init, await body(session)

    return anyio.run(main)


def text_of(result):
    assert len(result.content) == 1 and result.content[0].type == "text", result
    return result.content[0].text


@needs_sdk
def test_sdk_session_reads_the_job(cli, job):
    pid = job.pid
    bad_sql = "SELEC step FROM python.steps"

    async def body(s):
        out = {"tools": (await s.list_tools()).tools}
        out["targets"] = await s.call_tool("list_targets", {})
        out["query"] = await s.call_tool("query", {"target": str(pid), "sql":
                                                   "SELECT step, wall FROM python.steps ORDER BY step"})
        out["cut"] = await s.call_tool("query", {"target": pid, "sql": "SELECT * FROM "
                                                 "python.torch_trace", "max_rows": 3})
        out["bad_sql"] = await s.call_tool("query", {"target": str(pid), "sql": bad_sql})
        out["bad_arg"] = await s.call_tool("query", {"target": str(pid), "sql": "SELECT 1",
                                                     "max_rows": 0})
        out["report"] = await s.call_tool("report", {"target": str(pid)})
        out["eval"] = await s.call_tool("eval", {"target": str(pid), "code": "print(1)"})
        out["gone"] = await s.call_tool("info", {"target": "999999999"})
        out["prompts"] = (await s.list_prompts()).prompts
        out["diagnose"] = await s.get_prompt("diagnose", {"target": str(pid)})
        out["resources"] = (await s.list_resources()).resources
        out["method"] = await s.read_resource("probing://method")
        return out

    init, out = sdk_session(cli, [], body)
    assert init.server_info.name == "probing" and init.protocol_version == "2025-11-25"
    assert init.capabilities.tools and init.capabilities.prompts and init.capabilities.resources

    tools = {t.name: t for t in out["tools"]}
    assert set(tools) == READ_TOOLS, sorted(tools)  # no eval without --allow-eval
    assert tools["query"].input_schema["required"] == ["target", "sql"]
    assert all(t.annotations.read_only_hint for t in tools.values())

    targets = out["targets"].structured_content["targets"]
    assert not out["targets"].is_error and pid in [t["pid"] for t in targets], targets

    # The rows are the CLI's rows (the same function answers both).
    q = out["query"]
    assert not q.is_error, text_of(q)
    assert q.structured_content["columns"] == ["step", "wall"]
    assert q.structured_content["rows"] == [[r["step"], r["wall"]] for r in
                                            cli.query(pid, "SELECT step, wall FROM python.steps "
                                                      "ORDER BY step")]
    assert q.structured_content["row_count"] == 30 and q.structured_content["truncated"] is False
    assert "(30 rows)" in text_of(q)

    cut = out["cut"].structured_content
    assert cut["row_count"] == 3 and cut["truncated"] is True and "max_rows 3" in cut["note"]
    assert "only the first 3 of the" in text_of(out["cut"])

    # A SQL error is a tool error carrying the CLI's own message, caret included.
    assert out["bad_sql"].is_error and out["bad_sql"].structured_content is None
    cli_error = cli(pid, "query", bad_sql, check=False)
    assert cli_error.returncode == 1
    assert text_of(out["bad_sql"]) == cli_error.stderr
    assert 'near "SELEC": syntax error' in text_of(out["bad_sql"])
    assert out["bad_arg"].is_error
    assert text_of(out["bad_arg"]) == ("probing: query's argument 'max_rows' must be a whole "
                                       "number from 1 to 10000, not 0\n")
    assert out["gone"].is_error and text_of(out["gone"]) == "probing: no such process: 999999999\n"

    r = out["report"]
    assert not r.is_error and r.structured_content["primary"] == "data_bound", text_of(r)
    assert text_of(r).splitlines()[1].startswith("primary finding: data loading bound")

    assert out["eval"].is_error and "--allow-eval" in text_of(out["eval"])

    assert {p.name for p in out["prompts"]} == {"diagnose", "is_it_stuck", "did_my_change_help"}
    diagnose = out["diagnose"].messages[0].content.text
    assert f"target {pid}" in diagnose and "Profile before you optimise" in diagnose
    phases = [diagnose.index(f"{n}. {name}") for n, name in
              enumerate(["Baseline", "Bottleneck type", "Component", "Operation"], 1)]
    assert phases == sorted(phases)
    assert "### Bottleneck type" in diagnose  # docs/report.md's method follows
    assert {r.uri for r in out["resources"]} == {"probing://method", "probing://tables"}
    method = out["method"].contents[0].text
    assert method.startswith("## Method\n") and "## Findings" not in method
    with open(os.path.join(os.path.dirname(__file__), "../../docs/report.md")) as f:
        assert method.rstrip("\n") in f.read()


@needs_sdk
def test_sdk_eval_only_with_allow_eval(cli, job):
    async def body(s):
        names = {t.name for t in (await s.list_tools()).tools}
        ok = await s.call_tool("eval", {"target": str(job.pid),
                                        "code": "print(type(model).__name__)"})
        raised = await s.call_tool("eval", {"target": str(job.pid), "code": "1/0"})
        return names, ok, raised

    _, (names, ok, raised) = sdk_session(cli, ["--allow-eval"], body)
    assert names == READ_TOOLS | {"eval"}
    assert not ok.is_error and text_of(ok) == "MLP\n"
    assert ok.structured_content["ok"] is True and ok.structured_content["stdout"] == "MLP\n"
    assert raised.is_error and "ZeroDivisionError: division by zero" in text_of(raised)
    assert raised.structured_content["ok"] is False


# ----------------------------------------------------------------------------- raw JSON-RPC


class Raw:
    """`probing mcp` with pipes, spoken to line by line."""

    def __init__(self, cli, *args):
        self.proc = subprocess.Popen([cli.binary, "mcp", *args], env=cli.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    def send(self, data):
        self.proc.stdin.write(data if isinstance(data, bytes) else data.encode())
        self.proc.stdin.flush()

    def request(self, id, method, params=None):
        msg = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(json.dumps(msg) + "\n")

    def answer(self, timeout=ANSWER_TIMEOUT_S):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"no answer within {timeout} s"
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), line
        return json.loads(line)

    def close(self, timeout=20):
        """Closes stdin; returns the exit status and the rest of stdout."""
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        return self.proc.wait(timeout=timeout), rest


def test_raw_errors_have_the_specification_codes(cli, job):
    s = Raw(cli)
    try:
        s.send("{not json\n")
        a = s.answer()
        assert a["id"] is None and a["error"]["code"] == -32700, a
        s.request(1, "no/such/method")
        a = s.answer()
        assert a["id"] == 1 and a["error"] == {"code": -32601,
                                               "message": "Method not found: no/such/method"}
        s.send('[{"jsonrpc": "2.0", "id": 2, "method": "ping"}]\n')  # a batch
        assert s.answer()["error"]["code"] == -32600
        s.send('{"id": 3, "method": "ping"}\n')  # no "jsonrpc": "2.0"
        a = s.answer()
        assert a["id"] == 3 and a["error"]["code"] == -32600
        s.request(4, "tools/call", {"name": "no_such_tool", "arguments": {}})
        a = s.answer()
        assert a["id"] == 4 and a["error"]["code"] == -32602 and "no_such_tool" in a["error"]["message"]
        s.request(5, "resources/read", {"uri": "probing://nothing"})
        a = s.answer()
        assert a["error"]["code"] == -32002 and a["error"]["data"] == {"uri": "probing://nothing"}
        s.send('{"jsonrpc": "2.0", "method": "notifications/whatever"}\n')  # no answer
        s.request("six", "ping")
        assert s.answer() == {"jsonrpc": "2.0", "id": "six", "result": {}}
        rc, rest = s.close()
        assert rc == 0 and rest == b""
    finally:
        s.proc.kill()


def test_raw_oversized_line_is_refused_and_the_server_goes_on(cli, job):
    s = Raw(cli)
    try:
        huge = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "query", "arguments": {"target": str(job.pid),
                                           "sql": "SELECT '" + "x" * (5 << 20) + "'"}}})
        s.send(huge + "\n")
        a = s.answer()
        assert a["id"] is None and a["error"]["code"] == -32600 and "4 MiB" in a["error"]["message"]
        s.request(2, "tools/call", {"name": "query", "arguments": {
            "target": str(job.pid), "sql": "SELECT COUNT(*) AS n FROM python.steps"}})
        a = s.answer()
        assert a["id"] == 2 and a["result"]["structuredContent"]["rows"] == [[30]], a
        # stdin ends with a request read: it is answered, then the server ends.
        s.request(3, "ping")
        rc, rest = s.close()
        assert rc == 0 and json.loads(rest) == {"jsonrpc": "2.0", "id": 3, "result": {}}
    finally:
        s.proc.kill()


def children(pid):
    """The pids whose parent is pid."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


SLEEP = "import time; time.sleep(45)"  # longer than any wait below


def test_raw_cancelled_call_gets_no_answer(cli, job):
    s = Raw(cli, "--allow-eval")
    try:
        s.request(1, "tools/call", {"name": "eval", "arguments": {"target": str(job.pid),
                                                                  "code": SLEEP}})
        time.sleep(0.3)  # let the call start (a cancel before it is just as fine)
        s.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": 1, "reason": "the user changed their mind"}})
               + "\n")
        s.request(2, "ping")
        # Well before the eval's 45 s: the next answer is the ping's, and the eval has none.
        assert s.answer(timeout=20) == {"jsonrpc": "2.0", "id": 2, "result": {}}
        rc, rest = s.close()
        assert rc == 0 and rest == b""
    finally:
        s.proc.kill()


def test_raw_client_gone_mid_call_ends_the_server(cli, job):
    s = Raw(cli, "--allow-eval")
    try:
        s.request(1, "tools/call", {"name": "eval", "arguments": {"target": str(job.pid),
                                                                  "code": SLEEP}})
        time.sleep(0.3)
        assert children(s.proc.pid) == []  # it runs nothing of its own, no probing child
        s.proc.stdin.close()   # the client disconnects: both pipes closed
        s.proc.stdout.close()
        assert s.proc.wait(timeout=20) == 0  # not after the eval's 45 s
        assert not os.path.exists(f"/proc/{s.proc.pid}")
        assert b"probing: " not in s.proc.stderr.read()  # no error logged
        # The job answers as before.
        assert cli.scalar(job.pid, "SELECT COUNT(*) FROM python.steps") == 30
    finally:
        s.proc.kill()
