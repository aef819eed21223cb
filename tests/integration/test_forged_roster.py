"""Round three of docs/security.md, items 1 and 2: the job's roster lives in its c10d TCPStore,
which anyone who can reach MASTER_PORT may rewrite. A real two-rank gloo job (cluster_job.py,
every rank listening on TCP with the job's token file) and a process that rewrites rank 1's
entry in that store:

- to a TCP listener of its own that records every byte it receives: the token, or anything
  that would let the listener make another request, never reaches it; `ranks`, `hang` and
  `query --ranks all` name the entry as forged, do not count it as a rank, and exit non-zero;
- to a Unix socket of another uid on this host: refused before a byte is sent, as the direct
  `probing <socket> query` refuses it;
- to a `tcp` value that is the path of a recording: never opened as one.

The heartbeat is slowed (PROBING_JOB_HEARTBEAT) so that rank 1's agent does not rewrite its
entry while a test runs; each test puts the real entry back.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import PYTHON, STEP_TIMEOUT_S, WORKLOADS, free_port

NOBODY = 65534
TOKEN = "forged-roster-test-token-0123456789abcdef"
HOST = "node-a"
MARK = "FORGED-ANSWER-7731"  # what the forger answers; must never reach the output

COMMANDS = {
    "ranks": ["ranks"],
    "hang": ["hang"],
    "query": ["query", "--ranks", "all", "SELECT 1 AS x", "-f", "csv"],
}

# A fake agent: answers every request with 200 and plausible JSON holding MARK, and appends
# every byte it receives to a file. Run in a thread of the test (TCP) or as a process of
# another uid (Unix).
FAKE_AGENT = r'''
import json, os, socket, sys, time
def answer(path):
    if path.startswith("/api/query"):
        return {"columns": ["x"], "rows": [["%(mark)s"]], "row_count": 1, "truncated": False}
    if path.startswith("/api/rank"):
        return {"rank": 1, "step": 987654, "step_started": time.time(), "host": "%(mark)s",
                "collectives": []}
    if path.startswith("/api/stack"):
        return {"threads": [{"name": "%(mark)s", "frames": []}]}
    return {"error": "%(mark)s"}
def serve(listener, log_path):
    while True:
        conn, _ = listener.accept()
        conn.settimeout(5)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                b = conn.recv(65536)
                if not b:
                    break
                data += b
            head, _, body = data.partition(b"\r\n\r\n")
            m = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
            need = int(m[0].split(b":")[1]) if m else 0
            while len(body) < need:
                b = conn.recv(65536)
                if not b:
                    break
                body += b
                data += b
            with open(log_path, "ab") as f:
                f.write(data + b"\n--end--\n")
            path = head.split(b" ")[1].decode() if b" " in head else "/"
            out = json.dumps(answer(path)).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %%d\r\nConnection: close\r\n\r\n" %% len(out) + out)
        except OSError:
            pass
        finally:
            conn.close()
''' % {"mark": MARK}


class TcpForger:
    """FAKE_AGENT on 127.0.0.1:<port>, in a thread of this process."""

    def __init__(self, work):
        self.log = work / f"tcp-forger-{time.monotonic_ns()}.log"
        self.log.write_bytes(b"")
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        scope = {}
        exec(FAKE_AGENT, scope)
        threading.Thread(target=scope["serve"], args=(self.sock, str(self.log)), daemon=True).start()

    def received(self):
        return self.log.read_bytes()


class Job:
    def __init__(self, cli, env, work):
        self.cli, self.work = cli, work
        self.control = work / "control"
        self.token_file = work / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.token_file.chmod(0o600)
        self.port = free_port()
        self.env = dict(env, PROBING_HOST=HOST, PROBING_TOKEN_FILE=str(self.token_file),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port), WORLD_SIZE="2",
                        PROBING_JOB_HEARTBEAT="3600")
        self.env.pop("PROBING_TOKEN", None)
        self.procs, self.outs = {}, {}

    def start(self):
        for rank in range(2):
            out = open(self.work / f"rank{rank}.out", "w+")
            self.outs[rank] = out
            self.procs[rank] = subprocess.Popen(
                [self.cli.binary, "run", "-o", self.work / "rec-%r.db", "--", PYTHON, "-u",
                 str(WORKLOADS / "cluster_job.py"), str(self.control)],
                env=dict(self.env, RANK=str(rank), LOCAL_RANK=str(rank)), stdout=out,
                stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            text = "".join((self.work / f"rank{r}.out").read_text() for r in range(2))
            if all(f"READY {r}" in text for r in range(2)):
                return
            if any(p.poll() is not None for p in self.procs.values()):
                break
            time.sleep(0.5)
        logs = "\n".join((self.work / f"rank{r}.out").read_text()[-3000:] for r in range(2))
        pytest.fail(f"the 2-rank job did not start:\n{logs}")

    def run_cli(self, *args, timeout=120):
        return subprocess.run([self.cli.binary, str(self.procs[0].pid), *[str(a) for a in args]],
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for f in self.outs.values():
            f.close()


@pytest.fixture(scope="module")
def job(cli, env, session_dir):
    work = session_dir / "forged-roster"
    work.mkdir()
    j = Job(cli, env, work)
    try:
        j.start()
        yield j
    finally:
        j.stop()


@pytest.fixture
def store(job):
    """Rank 1's entry in the job's c10d store, as a process that can reach MASTER_PORT sees it:
    forge(**fields) rewrites it; the real entry is put back afterwards."""
    torch_distributed = pytest.importorskip("torch.distributed")
    client = torch_distributed.TCPStore("127.0.0.1", job.port, is_master=False,
                                        timeout=timedelta(seconds=10))
    # the default group's store: PrefixStore("0/", PrefixStore("default_pg", TCPStore)) in
    # torch 2.x, "default_pg/" alone in older ones
    keys = [p + "probing/v1/-/rank/" for p in ("default_pg/0//", "default_pg/", "")]
    prefix = next((k for k in keys if client.check([k + "1"])), None)
    assert prefix, "rank 1 has no entry in the job's store"
    original = client.get(prefix + "1")

    class Store:
        def entry(self, rank):
            return json.loads(client.get(prefix + str(rank)))

        def forge(self, **fields):
            e = json.loads(original)
            e.update(fields)
            client.set(prefix + "1", json.dumps(e))

    yield Store()
    client.set(prefix + "1", original)


def requests_in(raw):
    """The HTTP requests in what the forger recorded: [(head lines, body)]."""
    out = []
    for chunk in raw.split(b"\n--end--\n"):
        if chunk:
            head, _, body = chunk.partition(b"\r\n\r\n")
            out.append((head.split(b"\r\n"), body))
    return out


def send(hostport, head_lines, body):
    """Replays a recorded request (its request line, headers and body) to hostport; the status."""
    return exchange(hostport, head_lines, body)[0]


def exchange(hostport, head_lines, body):
    """send(), returning the status and the whole answer (head and body)."""
    host, port = hostport.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        lines = [l for l in head_lines if not l.lower().startswith((b"host:", b"connection:"))]
        s.sendall(b"\r\n".join(lines + [b"Host: " + hostport.encode(), b"Connection: close"])
                  + b"\r\n\r\n" + body)
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    return int(data.split(b" ", 2)[1]), data


class Relay:
    """What sits on the wire between the CLI and an agent: a TCP relay on 127.0.0.1:<port> to
    upstream that keeps every byte a client sends, one entry per connection (the CLI opens one
    per request)."""

    def __init__(self, upstream):
        self.upstream = upstream.rsplit(":", 1)
        self.sent = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            client, _ = self.sock.accept()
            up = socket.create_connection((self.upstream[0], int(self.upstream[1])), timeout=30)
            kept = bytearray()
            self.sent.append(kept)
            threading.Thread(target=self._pipe, args=(client, up, kept), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, client, None), daemon=True).start()

    @staticmethod
    def _pipe(src, dst, kept):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if kept is not None:
                    kept += b
                dst.sendall(b)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def requests(self):
        return requests_in(b"".join(bytes(k) + b"\n--end--\n" for k in self.sent))


@pytest.mark.parametrize("command", COMMANDS)
def test_forged_tcp_entry_gets_no_token_and_is_named(job, store, command):
    forger = TcpForger(job.work)
    store.forge(host="elsewhere", tcp=f"127.0.0.1:{forger.port}")
    r = job.run_cli(*COMMANDS[command], "--deadline", 5)
    out = r.stdout + r.stderr
    received = forger.received()
    reqs = requests_in(received)
    assert reqs, f"the CLI never asked the forged endpoint; output:\n{out}"
    # the token, and nothing that can stand for it, reached the forger
    assert TOKEN.encode() not in received, received
    assert b"bearer" not in received.lower(), received
    assert r.returncode != 0, out
    assert re.search(r"rank 1 \(elsewhere(, pid \d+)?\).*forged roster entry: 127\.0\.0\.1:%d did not prove "
                     r"that it holds the job's token" % forger.port, out), out
    assert MARK not in out and "987654" not in out, out
    if command == "query":
        assert r.stdout == f"rank,host,x\n0,{HOST},1\n", r.stdout
    # what the forger holds is good for nothing else: replayed to rank 0 as it is, as another
    # request, or as a bearer token, rank 0 refuses it
    rank0_tcp = store.entry(0)["tcp"]
    head, body = reqs[0]
    auth = [l for l in head if l.lower().startswith(b"authorization:")]
    assert auth, head
    assert send(rank0_tcp, head, body) == 401
    other = [b"POST /api/query HTTP/1.1", auth[0], b"Content-Type: application/json",
             b"Content-Length: 20"]
    assert send(rank0_tcp, other, b'{"sql":"SELECT 42"}\n') == 401
    mac = auth[0].split(b"m=")[-1]
    assert send(rank0_tcp, [b"GET /api/info HTTP/1.1", b"Authorization: Bearer " + mac], b"") == 401


def nobody_socket(work):
    """A Unix socket that a process running as uid NOBODY listens on (FAKE_AGENT): the process
    and the file where it records what it receives."""
    d = Path(tempfile.mkdtemp(prefix="probing-forger-"))  # reachable by NOBODY, unlike work
    d.chmod(0o777)
    path, log = d / "agent.sock", d / "received"
    script = FAKE_AGENT + (f"\nimport os, socket, sys\nos.setgid({NOBODY})\nos.setuid({NOBODY})\n"
                           "s = socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen(16)\n"
                           "print('LISTENING', flush=True)\nserve(s, sys.argv[2])\n")
    p = subprocess.Popen([sys.executable, "-c", script, str(path), str(log)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "LISTENING"
    return p, path, log


@pytest.mark.parametrize("command", COMMANDS)
def test_forged_unix_entry_of_another_uid_is_refused(job, store, cli, command):
    if os.geteuid() != 0:
        pytest.skip("making a socket of another uid needs root")
    p, path, log = nobody_socket(job.work)
    try:
        # the direct command refuses it
        direct = subprocess.run([cli.binary, str(path), "query", "SELECT 1"], env=job.env,
                                capture_output=True, text=True, timeout=60)
        assert direct.returncode == 1 and f"runs as uid {NOBODY}" in direct.stderr, direct.stderr
        store.forge(host=HOST, unix=str(path), tcp="", pid=p.pid)
        r = job.run_cli(*COMMANDS[command], "--deadline", 5)
        out = r.stdout + r.stderr
        assert r.returncode != 0, out
        assert re.search(r"rank 1 \(%s(, pid \d+)?\).*forged roster entry: refusing to talk to %s: the process "
                         r"listening there \(pid %d\) runs as uid %d" % (HOST, re.escape(str(path)),
                                                                         p.pid, NOBODY), out), out
        assert MARK not in out and "987654" not in out, out
        # it was connected to (the check needs a connected socket) but got not one byte
        got = log.read_bytes().replace(b"\n--end--\n", b"") if log.exists() else b""
        assert got == b"", f"a request reached the other uid's socket: {got[:300]!r}"
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(path.parent, ignore_errors=True)


def test_tcp_entry_that_is_a_file_is_not_opened_as_a_recording(job, store):
    recording = job.work / "rec-0.db"
    deadline = time.monotonic() + 30
    while not (recording.exists() and recording.read_bytes()[:15] == b"SQLite format 3"):
        assert time.monotonic() < deadline, "rank 0's recording was not written"
        time.sleep(0.5)
    store.forge(host="elsewhere", tcp=str(recording))
    r = job.run_cli("query", "--ranks", "all", "SELECT 1 AS x", "-f", "csv", "--deadline", 5)
    assert r.returncode == 3, r.stderr
    assert r.stdout == f"rank,host,x\n0,{HOST},1\n", r.stdout
    assert (f"rank 1 (elsewhere) is missing: its TCP address '{recording}' is not host:port"
            in r.stderr), r.stderr
    r = job.run_cli("ranks", "-f", "json", "--deadline", 5)
    assert r.returncode == 3, r.stderr
    rows = json.loads(r.stdout)
    assert rows[1]["state"] == f"unreachable: its TCP address '{recording}' is not host:port", rows


def test_real_rank_over_tcp_still_answers(job, store):
    """The same entry with its real TCP address, as a rank on another host is reached: the
    signed request is served by rank 1 and its signed answer is used."""
    real = store.entry(1)
    assert real["tcp"], real
    store.forge(host="elsewhere")
    r = job.run_cli("query", "--ranks", "all", "SELECT 1 AS x", "-f", "csv", "--deadline", 10)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"rank,host,x\n0,{HOST},1\n1,elsewhere,1\n", "")
    r = job.run_cli("ranks", "-f", "json", "--deadline", 10)
    assert r.returncode == 0, r.stderr
    assert [row["host"] for row in json.loads(r.stdout)] == [HOST, "elsewhere"]
    # the direct TCP target, typed by the user with the job's token, answers too
    out = subprocess.run([job.cli.binary, real["tcp"], "query", "SELECT 2 AS y", "-f", "csv"],
                         env=job.env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, "y\n2\n"), out.stderr


def test_request_signed_for_one_rank_is_refused_by_the_other(job, store):
    """Issue 49 item 4: a typed host:port target used to be signed with r=- (any rank), and each
    agent kept its own nonces, so a request captured on its way to rank 0 was served again by
    rank 1, which has the same token. Now the CLI first learns which agent listens there (a
    signed GET /api/identity: its answer proves the agent's id and rank) and signs the request
    for that agent alone: rank 1 refuses it, rank 0 refuses it as a replay. The roster names
    each rank's agent, the ids are distinct."""
    rank0, rank1 = store.entry(0), store.entry(1)
    relay = Relay(rank0["tcp"])
    out = subprocess.run([job.cli.binary, f"127.0.0.1:{relay.port}", "query", "SELECT 42 AS x",
                          "-f", "csv"], env=job.env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, "x\n42\n"), out.stderr
    reqs = relay.requests()
    queries = [(h, b) for h, b in reqs if h[0].startswith(b"POST /api/query")]
    assert len(queries) == 1, reqs
    head, body = queries[0]
    status, answer = exchange(rank1["tcp"], head, body)
    assert status == 401 and b"the request was signed for another agent" in answer, answer
    assert send(rank0["tcp"], head, body) == 401
    assert rank0["agent"] != rank1["agent"] and len(rank0["agent"]) == 32, (rank0, rank1)
    auth = next(l for l in head if l.lower().startswith(b"authorization:"))
    assert b"a=" + rank0["agent"].encode() in auth and b",r=0," in auth, auth
    # the identity request, the one that names no agent, gets rank 1 to say who it is, nothing else
    ident = [(h, b) for h, b in reqs if h[0].startswith(b"GET /api/identity")]
    assert len(ident) == 1, reqs
    status, answer = exchange(rank1["tcp"], *ident[0])
    assert status == 200, answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"agent": rank1["agent"], "rank": 1}
