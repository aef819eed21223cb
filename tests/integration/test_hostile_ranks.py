"""Hardening, round four (issue 49, items 6 to 9): a lying rank's arrivals, a stopped process,
empty standard input, inject again under `run -o`, and the SQL a hostile recording brings.
Real binary, real files and processes."""
import json
import os
import signal
import subprocess
import sys
import time

from test_hostile_files import CATALOGUE, ENDLESS, PEAK_RSS, write_db

# ----------------------------------------------------------------------------- item 9


def test_a_recordings_views_are_never_run(cli, tmp_path):
    """Endless views where the tables should be: report and query are refused at once (main
    ran each for the 30 s query limit), naming the view."""
    path = write_db(tmp_path / "hostile.db", CATALOGUE + "".join(
        f"CREATE VIEW {t} AS {ENDLESS};" for t in ("run", "steps", "torch_trace")),
        info={"rank": 0})
    why = "is a view defined by the recording file: probing runs no SQL that a file brings"
    r = cli(path, "report", check=False, timeout=20)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == ("probing: cannot build the report: cannot read python.torch_trace: not "
                        f"authorized: probing's SQL is read-only (torch_trace {why})\n")
    r = cli(path, "query", "SELECT COUNT(*) FROM python.steps", check=False, timeout=20)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == f"probing: SQL error: not authorized: probing's SQL is read-only (steps {why})\n"


# ----------------------------------------------------------------------------- item 8


def test_empty_standard_input_says_it_is_empty(cli, tmp_path):
    path = write_db(tmp_path / "rec.db", CATALOGUE, info={"rank": 0})
    for command, what in (("query", "SQL"), ("eval", "code")):
        r = cli(path, command, "-", check=False, input="")
        assert (r.returncode, r.stdout) == (2, "")
        assert r.stderr == (f"probing: no {what} on standard input (it was empty): pipe the "
                            f"{what} in, or give it as an argument\n")


LOOP = "import time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.05)\n"


def test_a_stopped_process_is_named_and_inject_again_under_run_o(cli, launcher, tmp_path):
    """Item 7: a query to a SIGSTOPped process ends within seconds (main waited 120 s: the CLI
    timeout here is 30 s), exit 4. Item 8: detach then inject under `run -o` does not claim
    that the recording 'exists; pass --force'."""
    rec = tmp_path / "run.db"
    t = launcher.command([cli.binary, "run", "-o", rec, "--", sys.executable, "-u", "-c", LOOP],
                         name="loop")
    os.kill(t.pid, signal.SIGSTOP)
    try:
        r = cli(t.pid, "query", "SELECT 1", check=False, timeout=30)
    finally:
        os.kill(t.pid, signal.SIGCONT)
    assert (r.returncode, r.stdout) == (4, "")
    assert r.stderr == (f"probing: process {t.pid} is stopped (state T: SIGSTOP or Ctrl-Z; kill "
                        "-CONT resumes it): its agent cannot answer until the process runs again\n")
    cli(t.pid, "detach")
    deadline = time.monotonic() + 30
    while t.socket_path.exists():
        assert time.monotonic() < deadline, "the detach"
        time.sleep(0.05)
    time.sleep(0.5)
    cli(t.pid, "inject")
    cli(t.pid, "query", "SELECT 1")
    assert "pass --force" not in t.stderr(), t.stderr()
    assert (f"probing: recording to {rec} stays off: that file holds this process's recording "
            f"up to its detach, which this agent does not replace; to record again: probing "
            f"{t.pid} record -o NEW.db") in t.stderr(), t.stderr()


# ----------------------------------------------------------------------------- item 6

FAKE_AGENT = r'''
import json, os, socket, sys, time
groups, per = int(sys.argv[1]), int(sys.argv[2])
path = f"{os.environ['PROBING_DIR']}/{os.getpid()}.sock"
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(16)
now = time.time()
arrivals = json.dumps({"rank": 0, "now": now, "host": "h", "step_median_s": 0.1, "groups": [
    {"group": f"g{i}", "arrivals": [[k, "allreduce", 8, now, now] for k in range(1, per + 1)]}
    for i in range(groups)]}).encode()
answers = {"/api/job": json.dumps({"registered": False, "world": 1, "rank": 0, "host": "h",
                                   "pid": os.getpid()}).encode(), "/api/arrivals": arrivals,
           "/api/query": b'{"columns":["a"],"rows":[],"row_count":0,"truncated":false}'}
print("ready", flush=True)
while True:
    c, _ = s.accept()
    data = b""
    while b"\r\n\r\n" not in data:
        b = c.recv(65536)
        if not b:
            break
        data += b
    out = answers.get(data.split(b" ")[1].decode() if b" " in data else "", b"{}")
    try:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                  % len(out) + out)
    except OSError:
        pass
    c.close()
'''


def test_stragglers_bounds_what_a_lying_rank_costs(cli, launcher):
    """40,000 groups of 4 arrivals (about 10 MB of JSON; main parsed all of it, about 9 times
    its size) are dropped at the 4 MB cap; 30,000 groups of one are cut to 64 groups. A memory
    bound, not a timing."""
    for groups, per, code, message in (
            (40000, 4, 1, "probing: rank 0 did not answer: its answer passed the 4 MB this "
             "command takes from one rank, and was dropped (more than a probing agent of this "
             "version sends: is it one?)\nprobing: no rank answered\n"),
            (30000, 1, 0, "probing: rank 0: its answer was cut to 64 groups of 2048 collectives "
             "(it sent 30000 groups, the longest of 1; an agent keeps at most 16 of 512): is it "
             "a probing agent?\n")):
        t = launcher.command([sys.executable, "-u", "-c", FAKE_AGENT, str(groups), str(per)],
                             name="liar")
        deadline = time.monotonic() + 60
        while "ready" not in t.stdout():
            assert time.monotonic() < deadline, "the lying agent"
            time.sleep(0.05)
        r = subprocess.run([sys.executable, "-c", PEAK_RSS, cli.binary, str(t.pid),
                            "stragglers"], env=cli.env, capture_output=True, text=True,
                           timeout=120)
        first, _, stderr = r.stdout.partition("\n")
        peak_kb, rc = map(int, first.split())
        assert (rc, stderr) == (code, message)
        assert peak_kb < 100 * 1024, f"peak RSS {peak_kb} KB"
