"""The self-contained wheel (issue 47): `make wheel`'s probing-c wheel installs with pip into a
fresh venv that has torch, and runs there with no compiler and none of the system's copies of
SQLite, jansson, libmicrohttpd, libcurl, GnuTLS, OpenSSL or libunwind.

The wheel is built once by scripts/wheel.sh for the running interpreter and kept in
build-wheel/test-<key>/, key = a hash of the sources that go into it (a rerun with the same
sources reuses it); the static C libraries scripts/build-deps.sh builds are kept in
~/.cache/probing-c/deps (PROBING_DEPS_DIR), which every checkout on the machine shares: they
depend only on the pins in that script. Cold (a new machine) the build takes some minutes; warm,
the test takes about half a minute. The fresh venv gets torch from the test's own
interpreter through a .pth file (a line with the folder that holds torch): a second copy of torch
would take minutes to install and is not what is tested. That folder also holds the source-built
probing; the wheel's probing, in the venv's own site-packages, comes first on sys.path.

The libraries and the compilers are hidden in a private mount namespace (`unshare -m`, /dev/null
bound over each file: a program that still needed one fails to load it). There the installed
`probing run` records a real training job, `exporter` scrapes it and `query` asks it while it
holds, and `query`, `report` and `ui` read the recording.
Outside it, a second run of the job shows in /proc/PID/maps which shared libraries the agent adds
to the job: none of those. Needs root (mount); skipped with the reason where unshare is refused."""
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import PYTHON, REPO, WORKLOADS

PLAT = "manylinux_2_34_x86_64"
# The system libraries the wheel must do without (sonames' stems): its C dependencies, and the
# TLS libraries they would bring (libmicrohttpd -> GnuTLS and its helpers, libcurl -> OpenSSL).
HIDDEN_LIBS = ("libsqlite3", "libjansson", "libmicrohttpd", "libcurl", "libunwind", "libgnutls",
               "libssl", "libcrypto", "libnettle", "libhogweed", "libp11-kit")
LIBDIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
           "/usr/local/lib")
# What an installed binary may still link: glibc and the compiler's runtime (every manylinux
# system has them).
ALLOWED_NEEDED = re.compile(r"^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|/lib64/ld-linux-x86-64"
                            r"\.so\.2|lib(c|m|dl|pthread|rt|gcc_s)\.so\.[0-9.]+)$")
STEPS = 12


def sh(cmd, env=None, timeout=300, check=True):
    r = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"{cmd} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def source_key():
    """A hash of the files that go into the wheel: everything git knows of but tests/ and bench/."""
    files = subprocess.run(["git", "-C", REPO, "ls-files", "-co", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split()
    h = hashlib.sha256(sys.version.encode())
    for f in sorted(files):
        p = REPO / f
        if f.startswith(("tests/", "bench/")) or not p.is_file():
            continue
        h.update(f.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def wheel():
    """The wheel for the running interpreter: built by scripts/wheel.sh, or the one already built
    from the same sources."""
    try:
        import mesonpy  # noqa: F401  (scripts/wheel.sh builds with the running interpreter)
    except ImportError:
        pytest.skip("meson-python is not importable by the test's Python (scripts/setup.sh installs it)")
    out = REPO / "build-wheel" / f"test-{source_key()}"
    found = sorted(out.glob("probing_c-*.whl"))
    if not found:
        for old in out.parent.glob("test-*"):  # wheels of sources since changed
            shutil.rmtree(old, ignore_errors=True)
        env = dict(os.environ, PYTHONS=PYTHON, WHEEL_DIR=str(out))
        env["PATH"] = f"{Path(PYTHON).parent}:{env.get('PATH', '')}"
        sh(["bash", REPO / "scripts" / "wheel.sh"], env=env, timeout=1800)
        found = sorted(out.glob("probing_c-*.whl"))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel installed (no index, no build) and torch through a .pth.
    Returns (root, bin dir, environment)."""
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not importable by the test's Python")
    root = tmp_path_factory.mktemp("wheel")
    v = root / "v"
    sh([PYTHON, "-m", "venv", "--without-pip", v])  # the test's pip installs into it (--python)
    env = {k: val for k, val in os.environ.items()
           if not k.startswith("PROBING") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{v / 'bin'}:/usr/bin:/bin"
    env["PROBING_CACHE_DIR"] = str(root / "cache")
    env["PROBING_DIR"] = str(root / "sockets")
    (root / "sockets").mkdir(mode=0o700)
    sh([PYTHON, "-m", "pip", "--python", v / "bin" / "python", "install", "-q", "--no-index",
        "--no-deps", wheel], env=env)
    # torch's folder goes on sys.path after the install: pip would see the source-built probing-c
    # there and take the wheel as installed already
    site = next((v / "lib").glob("python3*/site-packages"))
    (site / "zz_torch.pth").write_text(os.path.dirname(os.path.dirname(torch.__file__)) + "\n")
    assert (v / "bin" / "probing").is_file(), "the wheel installs the probing command"
    return root, v / "bin", env


def hidden_files():
    """The files to hide: every copy of HIDDEN_LIBS in the library folders, and the compilers
    (the drivers and cc1/cc1plus, which a driver found elsewhere would still run)."""
    files = set()
    for d in LIBDIRS:
        for stem in HIDDEN_LIBS:
            files.update(glob.glob(f"{d}/{stem}.so*") + glob.glob(f"{d}/{stem}-*.so*"))
    for pat in ("/usr/bin/*gcc*", "/usr/bin/*g++*", "/usr/bin/clang*", "/usr/bin/cc", "/usr/bin/c++",
                "/usr/bin/c89*", "/usr/bin/c99*", "/usr/bin/tcc", "/usr/local/bin/*gcc*",
                "/usr/local/bin/clang*", "/usr/lib/gcc/x86_64-linux-gnu/*/cc1*",
                "/usr/lib/llvm-*/bin/clang*"):
        files.update(glob.glob(pat))
    return sorted({os.path.realpath(f) for f in files if os.path.isfile(f)})


@pytest.fixture(scope="module")
def hide():
    """A command prefix that runs a command with hidden_files() covered by /dev/null."""
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "--bind",
                            "/dev/null", "/dev/null"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("a private mount namespace is not permitted here (unshare -m needs root or "
                    f"user namespaces): {probe.stderr.strip()}")
    files = hidden_files()
    script = "".join(f"mount --bind /dev/null '{f}' || exit 97\n" for f in files) + 'exec "$@"\n'
    return ["unshare", "-m", "--propagation", "private", "bash", "-c", script, "hide"], files


def wait_for(what, get, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = get()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"no {what} in {timeout} s")


@pytest.fixture(scope="module")
def hidden_run(venv, hide):
    """All from the installed wheel, with the libraries and compilers hidden: `probing run -o
    rec.db` of a real training job; while it holds after training, `exporter` scrapes it and
    `query` asks it live; then `query`, `report` and `ui` read the recording."""
    root, bindir, env = venv
    prefix, files = hide
    rec, hold, out = root / "train.db", root / "hold", root / "job.out"
    checks = sh(prefix + ["bash", "-c", "for c in gcc cc c++ clang; do $c --version >/dev/null "
                          "2>&1 && echo RUNS $c; done; " + f"'{bindir}/python' -c "
                          "\"import ctypes\nfor n in ('libsqlite3.so.0', 'libmicrohttpd.so.12', "
                          "'libgnutls.so.30', 'libssl.so.3', 'libcurl.so.4'):\n  try: ctypes.CDLL(n); "
                          "print('LOADS', n)\n  except OSError: pass\""], env=env).stdout
    r = {"checks": checks, "files": files,
         "doctor": json.loads(sh(prefix + [bindir / "probing", "doctor", "-f", "json"], env=env).stdout)}
    with open(out, "w") as f:
        job = subprocess.Popen([str(c) for c in prefix + [
            bindir / "probing", "run", "-o", rec, "--", bindir / "python", "-u",
            WORKLOADS / "many_modules.py", "--steps", STEPS, "--hold-file", hold]],
            env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    exporter = None
    try:
        def holding():
            assert job.poll() is None, out.read_text()[-3000:]
            return "HOLDING" in out.read_text()
        wait_for("HOLDING", holding, 240)
        ex_out = root / "exporter.out"
        with open(ex_out, "w") as f:
            exporter = subprocess.Popen([str(c) for c in prefix + [
                bindir / "probing", "exporter", "--listen", "127.0.0.1:0", "--timeout", "20"]],
                env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        addr = wait_for("exporter address", lambda: re.search(
            r"serving http://(127\.0\.0\.1:\d+)/metrics", ex_out.read_text()), 60).group(1)
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=60) as m:
            r["metrics"] = m.read().decode()
        pid = re.search(r'^probing_steps_total\{[^}]*pid="(\d+)"', r["metrics"], re.M)
        assert pid, r["metrics"][:3000]
        r["live"] = sh(prefix + [bindir / "probing", pid.group(1), "query", "-f", "json",
                                 "SELECT count(*) AS n FROM python.steps"], env=env)
        r["pid"] = pid.group(1)
    finally:
        if exporter:
            exporter.terminate()
            exporter.wait(timeout=30)
        hold.touch()
        try:
            job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, 9)
            job.wait()
    r["run"] = (job.returncode, out.read_text())
    r["query"] = sh(prefix + [bindir / "probing", rec, "query", "-f", "json",
                              "SELECT count(*) AS steps, max(step) AS last FROM python.steps"], env=env)
    r["report"] = sh(prefix + [bindir / "probing", rec, "report", "--json"], env=env)
    ui = subprocess.Popen([str(c) for c in prefix + [bindir / "probing", rec, "ui", "--listen",
                                                      "127.0.0.1:0"]],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
    try:
        url = ui.stdout.readline().strip()
        assert "/?token=" in url, (url, ui.stderr.read() if ui.poll() is not None else "")
        base, token = url.split("/?token=")
        with urllib.request.urlopen(f"{base}/?token={token}", timeout=60) as p:
            r["page"] = (p.status, p.read().decode(errors="replace"))
    finally:
        ui.terminate()
        ui.wait(timeout=30)
    return r


def installed_binaries(bindir):
    site = next((bindir.parent / "lib").glob("python3*/site-packages"))
    bins = [bindir / "probing"] + sorted((site / "probing").glob("*.so"))
    bins += sorted(p for p in (site / "probing_c.libs").glob("*")) if (site / "probing_c.libs").is_dir() else []
    return bins


def test_wheel_is_manylinux_and_small(wheel, venv):
    _, bindir, _ = venv
    tools = REPO / "build-wheel" / "tools" / "bin" / "auditwheel"
    show = sh([tools if tools.exists() else "auditwheel", "show", wheel]).stdout
    flat = " ".join(show.split())
    assert f'consistent with the following platform tag: "{PLAT}"' in flat, show
    assert wheel.name.endswith(f"{PLAT}.whl"), wheel.name
    assert wheel.stat().st_size < 15 * 1024 * 1024, wheel.stat().st_size
    # the agent, the CLI: only glibc's libraries are left to load, none bundled beside them
    for b in installed_binaries(bindir):
        assert not b.parent.name.endswith(".libs"), f"auditwheel bundled {b}"
        needed = [l.split()[0] for l in sh(["ldd", b]).stdout.splitlines() if l.strip()]
        assert needed and all(ALLOWED_NEEDED.match(n) for n in needed), (b, needed)
    # the autograd shim is not in the wheel: it is built on first use where a compiler is
    site = next((bindir.parent / "lib").glob("python3*/site-packages"))
    assert not list((site / "probing").glob("_autograd*.so"))
    assert (site / "probing" / "_autograd_src" / "autograd.cpp").is_file()


def test_the_wheel_runs_without_the_libraries_and_compilers(hidden_run):
    r = hidden_run
    assert "RUNS" not in r["checks"] and "LOADS" not in r["checks"], (r["checks"], r["files"])
    # no compiler: the autograd shim cannot be built, the Python probes run, and doctor says so
    backward = r["doctor"]["paths"]["backward"]
    assert not backward["active"] and "no C++ compiler found" in backward["what"], backward
    status, text = r["run"]
    printed = [int(n) for n in re.findall(r"^step (\d+) ", text, re.M)]
    assert status == 0 and printed and max(printed) >= STEPS - 1, text[-3000:]
    # the exporter's count of the job's steps is what the job answers live
    live = json.loads(r["live"].stdout)[0]["n"]
    scraped = re.search(r'^probing_steps_total\{[^}]*pid="%s"[^}]*\} (\d+)' % r["pid"],
                        r["metrics"], re.M)
    assert scraped and int(scraped.group(1)) == live >= STEPS - 1, (live, r["metrics"][:2000])
    rows = json.loads(r["query"].stdout)
    assert rows[0]["steps"] >= live and rows[0]["last"] >= STEPS - 2, rows
    report = json.loads(r["report"].stdout)
    assert {"baseline", "findings"} <= set(report) and report["findings"], report.keys()
    assert r["report"].stderr == "", r["report"].stderr
    status, html = r["page"]
    assert status == 200 and "<html" in html.lower(), html[:300]


def mapped_libs(bindir, env, probing):
    """The shared libraries mapped into the job (many_modules.py, a few steps), from its own
    /proc/self/maps at the end: with the agent (PROBING=1) or without it."""
    code = ("import runpy, sys\n"
            f"sys.path.insert(0, {str(WORKLOADS)!r}); sys.argv = ['many_modules.py', '--steps', '2']\n"
            f"runpy.run_path({str(WORKLOADS / 'many_modules.py')!r}, run_name='__main__')\n"
            "print('MAPS', sorted({l.split()[-1] for l in open('/proc/self/maps') if '.so' in l}))\n")
    out = sh([bindir / "python", "-c", code], env={**env, "PROBING": "1" if probing else "0"}).stdout
    line = next(l for l in out.splitlines() if l.startswith("MAPS "))
    return set(eval(line[5:]))  # a list literal the job printed


def test_the_agent_maps_no_tls_and_no_system_sqlite(venv):
    _, bindir, env = venv
    without = mapped_libs(bindir, env, False)
    with_agent = mapped_libs(bindir, env, True)
    added = sorted(with_agent - without)
    assert any(os.path.basename(p).startswith("_agent.") for p in added), added
    # the agent adds itself and nothing else from the system's library folders
    assert [p for p in added if not os.path.basename(p).startswith("_agent.")] == [], added
    for p in with_agent:
        name = os.path.basename(p)
        assert not name.startswith(("libgnutls", "libsqlite3", "libmicrohttpd", "libjansson",
                                    "libcurl", "libunwind", "libnettle", "libp11-kit")), p
