"""`probing <target> ui`: the web view, driven in a real headless Chromium (Selenium) against a
real training process (live, and a running one for capture and live updates) and against a
recording of it, with the real binary. Without chromium, chromedriver or selenium the browser
tests skip and say why (scripts/setup-extras.sh installs them); the token and command-line tests
need no browser.

What a user would notice is checked: every page loads without console errors, the overview
chart has one point per recorded step, the flame graph's top frames are those of `flamegraph
--folded`, the SQL box gives the rows of `probing query`, a request without the token gets 403,
the capture button downloads a Chrome trace. Screenshots of every page go to the test's tmp
directory."""
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

STEPS = 12
WAIT_S = 90  # a page condition on a loaded machine

PAGES = ["overview", "modules", "memory", "ranks", "sql"]

FORBIDDEN = ("403 forbidden: this web view needs its token. Open the URL that 'probing <target> "
             "ui' printed (it ends in ?token=...); the token changes each time ui starts.\n")
COOKIE_ONLY = ("403 forbidden: the web view's data needs its token (the X-Probing-Token header "
               "that its page sends, or ?token=); the cookie opens the page only. Open the URL "
               "that 'probing <target> ui' printed.\n")
FOREIGN_HOST = ("403 forbidden: the Host header does not name this web view (DNS rebinding?); "
                "open the URL that 'probing <target> ui' printed.\n")
FOREIGN_ORIGIN = ("403 forbidden: a request from a page of another origin; the web view answers "
                  "its own page only.\n")


# ----------------------------------------------------------------------------- helpers


class UIServer:
    """`probing <target> ui [args]` running; url is what it printed."""

    def __init__(self, cli, target, workdir, *args, env=None):
        self.err_path = Path(workdir) / f"ui-{os.getpid()}-{time.monotonic_ns()}.err"
        self.err = open(self.err_path, "wb")
        self.proc = subprocess.Popen([cli.binary, str(target), "ui", *map(str, args)],
                                     env=env or cli.env, stdout=subprocess.PIPE, stderr=self.err,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline, line = time.monotonic() + WAIT_S, b""
        while not line.endswith(b"\n"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"ui printed no URL:\n{self.err_path.read_text()}")
            if sel.select(timeout=0.5):
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                line += chunk
        sel.close()
        self.url = line.decode().strip()
        self.base, self.token = self.url.split("/?token=")

    def get(self, path, token=True, cookie=None, data=None, headers=None):
        """(status, body bytes, headers) of one request."""
        url = self.base + path
        if token:
            url += ("&" if "?" in url else "?") + "token=" + self.token
        req = urllib.request.Request(url, data=data, headers=headers or {})
        if cookie:
            req.add_header("Cookie", cookie)
        try:
            with urllib.request.urlopen(req, timeout=WAIT_S) as r:
                return r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.err.close()
        return self.proc.returncode


def browser_or_skip(download_dir=None):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (scripts/setup-extras.sh installs it)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if not chromium or not driver_bin:
        pytest.skip("chromium and chromedriver are not installed (Debian: chromium "
                    "chromium-driver; scripts/setup-extras.sh installs them)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if download_dir:
        opts.add_experimental_option("prefs", {"download.default_directory": str(download_dir),
                                               "download.prompt_for_download": False})
    # the browser is not ours to sanitize: under scripts/sanitize.sh the tests run with the ASan
    # runtime preloaded, which chromium must not inherit
    browser_env = {k: v for k, v in os.environ.items()
                   if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    try:
        d = webdriver.Chrome(service=Service(driver_bin, env=browser_env), options=opts)
    except Exception as e:  # a browser that cannot start here
        pytest.skip(f"headless chromium does not start: {str(e).splitlines()[0]}")
    d.set_script_timeout(WAIT_S)
    if download_dir:
        d.execute_cdp_cmd("Page.setDownloadBehavior",
                          {"behavior": "allow", "downloadPath": str(download_dir)})
    return d


def wait_for(driver, js, what, timeout=WAIT_S):
    """Polls the JS expression js (returning a truthy value when done); returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        v = driver.execute_script("return " + js)
        if v:
            return v
        if time.monotonic() > deadline:
            state = driver.execute_script(
                "return JSON.stringify({errors: window.probingUI && window.probingUI.errors, "
                "status: document.getElementById('status').textContent})")
            raise AssertionError(f"timed out waiting for {what}: {state}")
        time.sleep(0.2)


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


PAGE_READY = {
    "overview": "probingUI.overviewPoints > 0 && document.querySelectorAll('#findings .finding').length > 0",
    "modules": "probingUI.flame.forward && document.querySelectorAll('#flame svg g').length > 0 "
               "&& document.querySelectorAll('#mod-table tbody tr').length > 0",
    "memory": "probingUI.memoryPoints > 0",
    "ranks": "probingUI.rankCells > 0",
    "sql": "probingUI.sqlResult && probingUI.sqlResult.rows",
}


def visit_every_page(driver, ui, shots):
    """Opens the page, shows each tab until drawn, saves a screenshot of each. Returns the
    console errors."""
    driver.get(ui.url)
    for page in PAGES:
        driver.execute_script(f"location.hash = '#{page}'")
        wait_for(driver, PAGE_READY[page], f"the {page} page")
        shots.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(shots / f"{page}.png"))
    return console_errors(driver)


def folded_top(cli, target, stage):
    """{frame: microseconds} of the frames directly under the root, from `flamegraph --folded`."""
    out = cli(target, "flamegraph", "--folded", "--stage", stage).stdout
    top = {}
    for line in out.splitlines():
        stack, us = line.rsplit(" ", 1)
        first = stack.split(";")[0]
        top[first] = top.get(first, 0) + int(us)
    return top


def page_top(driver, stage):
    tree = driver.execute_script(f"return probingUI.flame['{stage}']")
    return {c["name"]: c["value"] for c in tree["children"]}


def check_page_matches_cli(driver, cli, target):
    """The numbers on the page are those of the CLI."""
    steps = cli.scalar(target, "SELECT count(*) FROM python.steps")
    assert steps >= STEPS
    assert driver.execute_script("return probingUI.overviewPoints") == steps
    assert driver.execute_script("return probingUI.overviewSteps") == steps
    assert driver.execute_script(
        "return document.getElementById('ov-steps').dataset.points") == str(steps)

    top = folded_top(cli, target, "forward")
    assert top and page_top(driver, "forward") == top

    sql = ("SELECT module, stage, count(*) AS calls, round(sum(duration), 9) AS s "
           "FROM python.torch_trace GROUP BY module, stage ORDER BY module, stage")
    driver.execute_script("location.hash = '#sql'")
    driver.execute_script("probingUI.sqlResult = null; document.getElementById('sql-text').value "
                          "= arguments[0]; document.getElementById('sql-run').click()", sql)
    result = wait_for(driver, "probingUI.sqlResult", "the SQL result")
    expected = cli.query(target, sql)
    assert result["columns"] == ["module", "stage", "calls", "s"]
    assert [dict(zip(result["columns"], r)) for r in result["rows"]] == expected
    assert len(expected) > 3
    text = driver.execute_script("return document.getElementById('sql-status').textContent")
    assert text == f"{len(expected)} rows"


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def held(session_launcher):
    """planted.py (healthy), STEPS steps, finished and holding: a live target whose record does
    not change."""
    t = session_launcher.traced("planted.py", "--case", "healthy", "--steps", STEPS,
                                "--print-every", 1)
    t.wait_holding()
    yield t
    t.kill()


@pytest.fixture(scope="module")
def recording(held, cli, tmp_path_factory):
    """The held process's whole record in a file (probing <pid> record), read offline."""
    path = tmp_path_factory.mktemp("ui-rec") / "run.db"
    cli(held.target(), "record", "-o", path)
    cli(held.target(), "record", "--stop")
    return path


# ----------------------------------------------------------------------------- no browser


def test_ui_requests_without_the_token_get_403(cli, recording, tmp_path):
    ui = UIServer(cli, recording, tmp_path)
    try:
        for path in ("/", "/ui/targets", "/web/ui.js", "/ui/report"):
            status, body, _ = ui.get(path, token=False)
            assert (status, body.decode()) == (403, FORBIDDEN), path
        status, body, _ = ui.get("/?token=" + "0" * len(ui.token), token=False)
        assert status == 403
        port = ui.base.rsplit(":", 1)[1]
        status, _, _ = ui.get("/ui/targets", token=False, cookie=f"probing_ui_{port}=wrong")
        assert status == 403
        status, body = ui.get(
            "/ui/query", token=False, data=b'{"sql": "SELECT 1"}')[:2]
        assert status == 403 and b"SELECT" not in body
        # the token once in the URL, then the cookie it sets is enough
        status, body, headers = ui.get("/")
        assert status == 200 and b"<title>probing</title>" in body
        cookie = headers["Set-Cookie"]
        name, value = cookie.split(";")[0].split("=", 1)
        # the cookie is a secret of this instance, not the token (every port of 127.0.0.1 gets
        # it), and it opens the page only: the job's data needs the token itself
        assert name == f"probing_ui_{port}" and value != ui.token and len(value) == 48
        assert cookie == f"probing_ui_{port}={value}; Path=/; HttpOnly; SameSite=Strict"
        cookie = f"{name}={value}"
        assert ui.get("/", token=False, cookie=cookie)[0] == 200
        assert ui.get("/web/ui.js", token=False, cookie=cookie)[0] == 200
        for path in ("/ui/targets", "/ui/report", "/ui/capture"):
            status, body, _ = ui.get(path, token=False, cookie=cookie)
            assert (status, body.decode()) == (403, COOKIE_ONLY), path
        status, body, _ = ui.get("/ui/targets", token=False, cookie=f"{name}={ui.token}")
        assert (status, body.decode()) == (403, FORBIDDEN)
        status, body, _ = ui.get("/ui/targets", token=False,
                                 headers={"X-Probing-Token": ui.token})
        assert status == 200
        assert json.loads(body)["kind"] == "recording"
        # no way out of the web directory
        for path in ("/web/../meson.build", "/web/..%2fmeson.build", "/web/.gitignore"):
            status, body, _ = ui.get(path)
            assert status == 404, path
        # a second ui gets another token, and a cookie of its own: the browser keeps both, so
        # the first view stays open
        other = UIServer(cli, recording, tmp_path)
        try:
            assert other.token != ui.token
            other_port = other.base.rsplit(":", 1)[1]
            other_cookie = other.get("/")[2]["Set-Cookie"].split(";")[0]
            assert other.get("/", token=False, cookie=f"probing_ui_{other_port}={value}")[0] == 403
            both = f"{cookie}; {other_cookie}"
            assert other.get("/", token=False, cookie=both)[0] == 200
            assert ui.get("/", token=False, cookie=both)[0] == 200
        finally:
            other.stop()
    finally:
        assert ui.stop() == 0


def test_ui_query_route_relays_the_targets_answer(cli, recording, tmp_path):
    ui = UIServer(cli, recording, tmp_path)
    try:
        status, body, _ = ui.get("/ui/query", data=b'{"sql": "SELECT count(*) FROM python.steps"}')
        assert status == 200
        assert json.loads(body)["rows"] == [[cli.scalar(recording, "SELECT count(*) FROM python.steps")]]
        status, body, _ = ui.get("/ui/query", data=b'{"sql": "DELETE FROM python.steps"}')
        assert status == 400
        error = json.loads(body)["error"]
        r = cli(recording, "query", "DELETE FROM python.steps", check=False)
        assert r.returncode == 1 and error and error in r.stderr
        status, body, _ = ui.get("/ui/query?t=7", data=b'{"sql": "SELECT 1"}')
        assert (status, json.loads(body)) == (
            400, {"error": "t= names no target of this view (see /ui/targets)"})
    finally:
        ui.stop()


def test_ui_targets_carry_the_phase_table(cli, recording, tmp_path):
    """The page charts the phases the server lists (src/common/phases.h): python.steps' columns
    in their order, with the legend and the stragglers' names the page prints."""
    ui = UIServer(cli, recording, tmp_path)
    try:
        status, body, _ = ui.get("/ui/targets")
        assert status == 200
        phases = json.loads(body)["phases"]
        assert [(p["column"], p["label"], p["short"], p["text"], p["rank_wait"], p["holds_wait"])
                for p in phases] == [
            ("data_wait", "data wait", "data", "data", False, False),
            ("forward", "forward", "forward", "forward", False, False),
            ("backward", "backward", "backward", "backward", False, True),
            ("optimizer", "optimizer", "optimizer", "optimizer", False, False),
            ("collectives", "collectives", "collectives", "collectives", True, False),
            ("grad_sync", "grad sync", "grad_sync", "gradient sync wait", True, False),
            ("other", "other", "other", "other host time", False, False)]
    finally:
        ui.stop()


def test_ui_job_routes_of_a_recording_say_why_not(cli, recording, tmp_path):
    """hang and stragglers read a running job's agents: a recording gets 400 and the reason."""
    ui = UIServer(cli, recording, tmp_path)
    try:
        for route, command in (("/ui/hang", "hang"), ("/ui/stragglers", "stragglers")):
            status, body, _ = ui.get(route)
            assert status == 400, body
            assert json.loads(body) == {"error": f"a recording has no live collectives: "
                                                 f"{command} needs the job"}
    finally:
        ui.stop()


def test_ui_cookbook_is_read_from_the_queries_directory(cli, recording, tmp_path):
    queries = tmp_path / "queries"
    queries.mkdir()
    (queries / "02_slowest.sql").write_text("SELECT step, wall FROM python.steps ORDER BY wall DESC LIMIT 5\n")
    (queries / "01_steps.sql").write_text("SELECT count(*) FROM python.steps\n")
    (queries / "notes.txt").write_text("not a query")
    ui = UIServer(cli, recording, tmp_path, env=dict(cli.env, PROBING_QUERIES_DIR=str(queries)))
    try:
        status, body, _ = ui.get("/ui/queries")
        assert status == 200
        assert json.loads(body)["queries"] == [
            {"name": "01_steps.sql", "sql": "SELECT count(*) FROM python.steps\n"},
            {"name": "02_slowest.sql",
             "sql": "SELECT step, wall FROM python.steps ORDER BY wall DESC LIMIT 5\n"}]
    finally:
        ui.stop()
    ui = UIServer(cli, recording, tmp_path,
                  env=dict(cli.env, PROBING_QUERIES_DIR=str(tmp_path / "absent")))
    try:
        assert json.loads(ui.get("/ui/queries")[1])["queries"] == []
    finally:
        ui.stop()


def test_ui_open_starts_the_browser_with_the_url(cli, recording, tmp_path):
    seen = tmp_path / "browser-args"
    fake = tmp_path / "fake-browser"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {seen}.tmp && mv {seen}.tmp {seen}\n")
    fake.chmod(0o755)
    ui = UIServer(cli, recording, tmp_path, "--open", env=dict(cli.env, BROWSER=str(fake)))
    try:
        deadline = time.monotonic() + WAIT_S
        while not seen.exists():
            assert time.monotonic() < deadline, "--open did not start $BROWSER"
            time.sleep(0.1)
        assert seen.read_text().strip() == ui.url
    finally:
        ui.stop()
    ui = UIServer(cli, recording, tmp_path, "--open",
                  env=dict(cli.env, BROWSER=str(tmp_path / "no-such-browser")))
    try:
        assert ui.get("/ui/targets")[0] == 200  # the view serves on
    finally:
        ui.stop()
    assert (f"probing: warning: --open: cannot start {tmp_path / 'no-such-browser'} (No such file "
            "or directory); open the URL above by hand") in ui.err_path.read_text()


def test_ui_bad_listen_addresses(cli, recording, tmp_path):
    r = cli(recording, "ui", "--listen", "nonsense", check=False)
    assert r.returncode == 2
    assert r.stderr == ("probing: --listen wants ADDR:PORT (127.0.0.1:8080, or port 0 for a free "
                        "one), not 'nonsense'\n")
    r = cli(recording, "ui", "--listen", "127.0.0.1:99999", check=False)
    assert r.returncode == 2 and "not '127.0.0.1:99999'" in r.stderr
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        r = cli(recording, "ui", "--listen", f"127.0.0.1:{port}", check=False)
    finally:
        taken.close()
    assert r.returncode == 2
    assert r.stderr == (f"probing: cannot listen on 127.0.0.1:{port}: Address already in use; "
                        "choose another address or port with --listen ADDR:PORT, or leave "
                        "--listen out for a free port on 127.0.0.1\n")
    r = cli(recording, "ui", "--bogus", check=False)
    assert r.returncode == 2 and "unknown option '--bogus'" in r.stderr


def test_ui_listen_port_is_used(cli, recording, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ui = UIServer(cli, recording, tmp_path, "--listen", f"127.0.0.1:{port}")
    try:
        assert ui.base == f"http://127.0.0.1:{port}"
        assert ui.get("/ui/targets")[0] == 200
    finally:
        ui.stop()


def test_ui_refuses_foreign_hosts_and_origins(cli, recording, tmp_path):
    """DNS rebinding (a Host that is not this server) and requests from a page of another
    origin (another 127.0.0.1 port) are refused even with the token; the page's own origin is
    served."""
    ui = UIServer(cli, recording, tmp_path)
    try:
        port = ui.base.rsplit(":", 1)[1]
        for host in (f"evil.example:{port}", "127.0.0.1:1", "127.0.0.1", ""):
            status, body, _ = ui.get("/ui/targets", headers={"Host": host})
            assert (status, body.decode()) == (403, FOREIGN_HOST), host
        for origin in (f"http://127.0.0.1:{int(port) + 1}", "null", f"http://evil.example:{port}"):
            status, body, _ = ui.get("/ui/query", data=b'{"sql": "SELECT 1"}',
                                     headers={"Origin": origin, "Content-Type": "text/plain"})
            assert (status, body.decode()) == (403, FOREIGN_ORIGIN), origin
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            status, body, _ = ui.get("/ui/query", data=b'{"sql": "SELECT 1"}',
                                     headers={"Host": host, "Origin": f"http://{host}"})
            assert (status, json.loads(body)["rows"]) == (200, [[1]]), host
    finally:
        ui.stop()


def test_ui_serves_on_while_idle_and_slow_sockets_are_open(cli, recording, tmp_path):
    """70 connections that send nothing, and some that send a request a byte at a time, do not
    lock the web view out (all local clients are 127.0.0.1, so no per-address limit can tell
    them from the user): the real request is answered, and the slow ones are closed once their
    request is late (10 s), however often they send a byte."""
    ui = UIServer(cli, recording, tmp_path)
    host, port = ui.base[len("http://"):].rsplit(":", 1)
    idle, slow = [], []
    try:
        for _ in range(70):
            idle.append(socket.create_connection((host, int(port)), timeout=WAIT_S))
        for _ in range(3):
            s = socket.create_connection((host, int(port)), timeout=WAIT_S)
            s.sendall(b"G")
            slow.append(s)
        status, body, _ = ui.get("/ui/targets")
        assert status == 200 and json.loads(body)["kind"] == "recording"
        # the slow ones go on sending a byte a second; the server ends them (EOF or reset)
        closed, deadline = set(), time.monotonic() + 3 * WAIT_S
        while len(closed) < len(slow) and time.monotonic() < deadline:
            for i, s in enumerate(slow):
                if i in closed:
                    continue
                try:
                    s.sendall(b"E")
                    s.setblocking(False)
                    try:
                        if s.recv(1) == b"":
                            closed.add(i)
                    except BlockingIOError:
                        pass
                    finally:
                        s.setblocking(True)
                except OSError:
                    closed.add(i)
            time.sleep(1)
        assert len(closed) == len(slow), "a request sent a byte a second was never cut off"
        status, _, _ = ui.get("/ui/targets")
        assert status == 200
    finally:
        for s in idle + slow:
            s.close()
        assert ui.stop() == 0




ASK_AS_OTHER = r"""
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = [socket.create_connection((host, port), timeout=60) for _ in range(n)]
got = []
for s in socks:
    s.sendall(b"GET / HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port))
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk or b"\r\n\r\n" in data + chunk:
                data += chunk
                break
            data += chunk
    except ConnectionResetError:
        pass
    got.append(data.split(b"\r\n", 1)[0].decode() or "closed")
print("\n".join(got))
"""


def test_ui_closes_another_users_connections_at_once(cli, recording, tmp_path, other_user):
    """A connection from another user of the machine (all local clients are 127.0.0.1: only
    the owner of the peer socket tells them apart) is closed before any answer, so its sockets
    hold no slot of the view; the owner is served."""
    ui = UIServer(cli, recording, tmp_path)
    host, port = ui.base[len("http://"):].rsplit(":", 1)
    try:
        # a Python the other user may run (the test's own may sit where only root reads)
        def runs(python):
            try:
                return subprocess.run([python, "-c", "pass"], user=other_user.pw_uid,
                                      group=other_user.pw_gid, cwd="/",
                                      capture_output=True).returncode == 0
            except OSError:
                return False
        python = next((p for p in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3")
                       if runs(p)), None)
        if not python:
            pytest.skip("no Python that the second user may run")
        r = subprocess.run([python, "-c", ASK_AS_OTHER, host, port, "5"],
                           user=other_user.pw_uid, group=other_user.pw_gid, cwd="/",
                           capture_output=True, text=True, timeout=WAIT_S)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["closed"] * 5
        status, body, _ = ui.get("/ui/targets")
        assert status == 200 and json.loads(body)["kind"] == "recording"
    finally:
        ui.stop()


# ----------------------------------------------------------------------------- browser


def test_ui_pages_of_a_live_process(cli, held, tmp_path):
    driver = browser_or_skip()
    ui = UIServer(cli, held.target(), tmp_path)
    try:
        errors = visit_every_page(driver, ui, tmp_path / "live")
        assert errors == []
        assert driver.execute_script("return probingUI.live") is True
        check_page_matches_cli(driver, cli, held.target())
        assert console_errors(driver) == []
    finally:
        driver.quit()
        ui.stop()


def test_ui_pages_of_a_recording(cli, recording, tmp_path):
    driver = browser_or_skip()
    ui = UIServer(cli, recording, tmp_path)
    try:
        errors = visit_every_page(driver, ui, tmp_path / "recording")
        assert errors == []
        assert driver.execute_script("return probingUI.live") is False
        check_page_matches_cli(driver, cli, recording)
        # the ranks page's metrics: the phases of the server's table, as the page had them
        options = driver.execute_script("return [...document.querySelectorAll('#rk-metric "
                                        "option')].map((o) => [o.value, o.textContent])")
        assert options == [
            ["wall", "step time"],
            ["data_wait + forward + optimizer + other", "time outside the waits"],
            ["data_wait", "data wait"], ["forward", "forward"], ["backward", "backward"],
            ["optimizer", "optimizer"], ["collectives", "collectives"],
            ["grad_sync", "grad sync"], ["other", "other"]], options
        # the backward flame graph too
        driver.execute_script("location.hash = '#modules'")
        driver.execute_script("const s = document.getElementById('fg-stage'); s.value = "
                              "'backward'; s.dispatchEvent(new Event('change'))")
        wait_for(driver, "probingUI.flame.backward", "the backward flame graph")
        assert page_top(driver, "backward") == folded_top(cli, recording, "backward")
        # the report's findings carry their SQL, one click from the SQL page
        driver.execute_script("location.hash = '#overview'")
        n = driver.execute_script("return document.querySelectorAll('#findings .finding').length")
        report = json.loads(cli(recording, "report", "--json").stdout)
        assert n == len(report["findings"])
        assert console_errors(driver) == []
    finally:
        driver.quit()
        ui.stop()


def test_ui_live_updates_and_capture_download(cli, launcher, tmp_path):
    """A job still training: the overview grows by itself, and the capture button downloads the
    profiler's Chrome trace."""
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    driver = browser_or_skip(downloads)
    t = launcher.traced("planted.py", "--case", "healthy", "--steps", 100000,
                        "--print-every", 50, hold=False)
    t.wait_steps(5)
    ui = UIServer(cli, t.target(), tmp_path)
    try:
        driver.get(ui.url)
        first = wait_for(driver, "probingUI.overviewSteps", "the first overview")
        wait_for(driver, f"probingUI.overviewSteps > {first}", "the overview to update by itself")
        driver.execute_script("document.getElementById('cap-steps').value = '1'; "
                              "document.getElementById('cap-go').click()")
        wait_for(driver, "/trace downloaded/.test(document.getElementById('cap-status')"
                         ".textContent) || document.querySelector('#cap-status .error')",
                 "the capture", timeout=240)
        status = driver.execute_script("return document.getElementById('cap-status').textContent")
        assert "trace downloaded" in status, status
        deadline = time.monotonic() + WAIT_S
        while not [p for p in downloads.glob("probing-capture-*.json")]:
            assert time.monotonic() < deadline, "no trace was downloaded"
            time.sleep(0.2)
        path = next(downloads.glob("probing-capture-*.json"))
        while path.stat().st_size == 0 or list(downloads.glob("*.crdownload")):
            assert time.monotonic() < deadline, "the download did not finish"
            time.sleep(0.2)
        trace = json.loads(path.read_text())
        assert trace["traceEvents"]
        assert console_errors(driver) == []
        driver.save_screenshot(str(tmp_path / "live-capture.png"))
    finally:
        driver.quit()
        ui.stop()
        t.kill()


def test_ui_ranks_of_a_job_on_this_machine(cli, env, session_dir, tmp_path):
    """One rank of a 2-rank torchrun job as the target: the rank page shows both, and names the
    rank planted slower (40 ms of sleep before its forward each step)."""
    from conftest import WORKLOADS, start_torchrun_job
    driver = browser_or_skip()
    job, ranks, release = start_torchrun_job(cli, env, session_dir, "ui-ddp-slow", 8,
                                             "--slow-rank", 1, "--slow-ms", 40)
    ui = UIServer(cli, ranks[0], tmp_path)
    try:
        status, body, _ = ui.get("/ui/targets")
        answer = json.loads(body)
        targets = answer["targets"]
        assert sorted((t["rank"], str(t["pid"])) for t in targets) == sorted(
            (r, p) for r, p in ranks.items())
        assert answer["missing"] == []
        # the ranks come from the job's roster, with the host each rank registered
        roster = {int(r["rank"]): r for r in json.loads(cli(ranks[0], "ranks", "-f", "json").stdout)}
        assert {t["rank"]: t["host"] for t in targets} == {r: roster[r]["host"] for r in (0, 1)}
        assert "1 of the 1 other ranks found in the job's roster (1 on this machine)" in \
            ui.err_path.read_text()
        driver.get(ui.url + "#ranks")
        wait_for(driver, "probingUI.rankCells > 0 && probingUI.stragglers", "the rank heat map")
        assert driver.execute_script("return probingUI.stragglers") == [1]
        steps = [cli.scalar(ranks[r], "SELECT count(*) FROM python.steps") for r in (0, 1)]
        assert driver.execute_script("return probingUI.rankCells") == sum(steps)
        # both ranks hold after their last step: the hang view names them and says what to run
        wait_for(driver, "probingUI.stalledRanks && probingUI.stalledRanks.length == 2",
                 "both ranks shown stalled")
        wait_for(driver, "probingUI.hangShown && probingUI.hangShown.length == 2",
                 "the stalled ranks' stacks")
        hang = driver.execute_script("return document.getElementById('rk-hang').textContent")
        assert "2 of 2 ranks made no step for more than 10 median steps (and 5 s)" in hang
        # what `probing <rank> hang` prints, then each stalled rank's stacks, main thread first
        said = driver.execute_script("return document.getElementById('rk-hang-text').textContent")
        # the seconds since the last step grow between the two readings
        same = lambda t: re.sub(r"for \d+ s while", "for N s while", t)
        assert same(said) == same(cli(ranks[0], "hang").stdout.rstrip())
        assert said.startswith("the job is stalled outside collectives: no step finished on any "
                               "rank for "), said
        assert "no rank is in a collective (2 of 2 ranks answered)" in said.splitlines()[0], said
        hold_line = next(n for n, line in enumerate(
            (WORKLOADS / "_workload.py").read_text().splitlines(), 1) if "time.sleep(0.05)" in line)
        for r in (0, 1):
            block = driver.execute_script(
                f"return document.querySelector('pre.hang-rank[data-rank=\\'{r}\\']').textContent")
            lines = block.splitlines()
            assert lines[0].startswith(f"rank {r} (") and lines[0].endswith(f", pid {ranks[r]})")
            assert lines[1].startswith(f'  thread {ranks[r]} "') and \
                lines[1].endswith('" MainThread'), lines
            assert lines[2] == f"      _workload.py:{hold_line} hold", lines
            assert f"probing {ranks[r]} backtrace --native    # rank {r}" in block
        driver.save_screenshot(str(tmp_path / "ranks.png"))
        assert console_errors(driver) == []
    finally:
        driver.quit()
        ui.stop()
        release()


def test_ui_ranks_the_roster_names_but_cannot_reach(cli, env, session_dir, tmp_path):
    """A rank in the job's roster that cannot be asked (its socket gone) is not dropped silently:
    /ui/targets lists it under "missing" with the reason `ranks` gives, and ui says so."""
    from conftest import start_torchrun_job
    job, ranks, release = start_torchrun_job(cli, env, session_dir, "ui-ddp-missing", 4)
    sock1 = next(a["endpoint"] for a in json.loads(cli("list", "-f", "json").stdout)
                 if str(a["pid"]) == ranks[1])
    os.rename(sock1, sock1 + ".aside")
    ui = None
    try:
        ui = UIServer(cli, ranks[0], tmp_path)
        status, body, _ = ui.get("/ui/targets")
        answer = json.loads(body)
        assert [(t["rank"], str(t["pid"])) for t in answer["targets"]] == [(0, ranks[0])]
        host = answer["targets"][0]["host"]
        assert answer["missing"] == [{"rank": 1, "host": host, "why":
                                      f"its socket {sock1} is gone (did the process exit?)"}]
        assert ("0 of the 1 other ranks found in the job's roster (0 on this machine); the "
                "others are listed on the Ranks page") in ui.err_path.read_text()
    finally:
        if ui:
            ui.stop()
        os.rename(sock1 + ".aside", sock1)
        release()


class CookieThief:
    """An HTTP server on another 127.0.0.1 port (another user's, say): it records the Cookie
    header of every request the browser sends it, and serves a page that tries a no-cors
    text/plain POST to the web view's capture route (which needs no CORS preflight) and a
    credentialed read of its targets."""

    def __init__(self, victim_base):
        import http.server
        import threading
        self.cookies = []
        page = ("<!doctype html><title>attack</title><script>\n"
                f"const v = {json.dumps(victim_base)};\n"
                "Promise.allSettled([\n"
                "  fetch(v + '/ui/capture', {method: 'POST', mode: 'no-cors', credentials: 'include',"
                "    headers: {'Content-Type': 'text/plain'}, body: '{\"steps\": 2}'}),\n"
                "  fetch(v + '/ui/targets', {credentials: 'include'}).then((r) => r.text()),\n"
                "]).then((r) => { window.results = r.map((x) => x.status); document.title = 'done'; });\n"
                "</script>").encode()
        thief = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                thief.cookies.append(self.headers.get("Cookie"))
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_ui_cookie_and_cross_origin_in_a_browser(cli, held, tmp_path):
    """In headless Chromium: after the page loads, its URL (and so the history) has no token,
    and a reload still works; a page from another 127.0.0.1 port that tries a no-cors POST to
    start a capture is refused (no capture starts); the cookie that the browser sends to that
    other port's server, replayed to the view, opens none of the job's data."""
    driver = browser_or_skip()
    ui = UIServer(cli, held.target(), tmp_path)
    thief = CookieThief(ui.base)
    try:
        capture_before = ui.get("/ui/capture")[:2]
        driver.get(ui.url)
        wait_for(driver, "probingUI.overviewPoints > 0", "the overview")
        assert "token" not in driver.current_url, driver.current_url
        assert driver.current_url == ui.base + "/"
        driver.refresh()
        wait_for(driver, "probingUI.overviewPoints > 0", "the overview after a reload")
        assert "token" not in driver.current_url
        assert console_errors(driver) == []

        driver.get(thief.url)
        wait_for(driver, "document.title === 'done'", "the attacking page")
        # the browser did send the view's cookie to the other port: cookies are per host
        port = ui.base.rsplit(":", 1)[1]
        stolen = [c for c in thief.cookies if c and f"probing_ui_{port}=" in c]
        assert stolen, thief.cookies
        assert ui.token not in stolen[0]
        # no capture started: the agent's capture state is what it was
        assert ui.get("/ui/capture")[:2] == capture_before
        # replayed from outside a browser, the cookie opens none of the job's data
        for path, data in (("/ui/targets", None), ("/ui/capture", b'{"steps": 2}'),
                           ("/ui/query", b'{"sql": "SELECT 1"}')):
            status, body, _ = ui.get(path, token=False, cookie=stolen[0], data=data,
                                     headers={"Content-Type": "text/plain"})
            assert (status, body.decode()) == (403, COOKIE_ONLY), path
        assert ui.get("/ui/capture")[:2] == capture_before
    finally:
        driver.quit()
        thief.stop()
        ui.stop()


def test_ui_device_card_of_a_recording(cli, recording, tmp_path):
    """The overview's device card (python.device_steps) stays hidden for this CPU record, and
    draws one point per step once the record holds device rows: here SIMULATED rows written into
    a copy as a GPU run would record them (the real rows come from scripts/gpu_check.sh)."""
    import shutil
    import sqlite3
    driver = browser_or_skip()
    copy = tmp_path / "dev.db"
    shutil.copy(recording, copy)
    db = sqlite3.connect(copy)
    steps = [r[0] for r in db.execute("SELECT step FROM steps ORDER BY step")]
    cols = [r[1] for r in db.execute("PRAGMA table_info(device_steps)")]
    for step in steps:
        row = {c: 0 for c in cols}
        row.update(step=step, wall=0.005, forward=0.002, backward=0.003, lag=0.0001)
        db.execute(f"INSERT INTO device_steps ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                   [row[c] for c in cols])
    db.commit()
    db.close()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain, dev = UIServer(cli, recording, tmp_path / "a"), UIServer(cli, copy, tmp_path / "b")
    try:
        driver.get(plain.url)
        wait_for(driver, "probingUI.overviewPoints > 0", "the overview")
        assert driver.execute_script("return document.getElementById('ov-device-row').hidden") is True
        assert driver.execute_script("return probingUI.devicePoints") == 0
        driver.get(dev.url)
        n = wait_for(driver, "probingUI.devicePoints", "the device card")
        assert n == len(steps)
        assert driver.execute_script("return document.getElementById('ov-device-row').hidden") is False
        assert "median lag" in driver.execute_script("return document.getElementById('ov-dev-note').textContent")
        assert console_errors(driver) == []
    finally:
        driver.quit()
        plain.stop()
        dev.stop()
