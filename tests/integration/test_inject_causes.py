"""`probing <pid> inject` names the real cause when it cannot work: a process of another user
injected by root (its agent would serve from that user's socket directory and could not answer
into root's: it used to look like a hang), and a Python that probing does not support (a fake
"python3.6": an executable of that name that defines Py_AddPendingCall, as a real one would)."""
import os
import pwd
import shutil
import subprocess
import time

import pytest


USER = "pb-cli-lane"


def wait_started(proc):
    deadline = time.monotonic() + 60
    while proc.stdout.readline().strip() != "READY":
        assert proc.poll() is None and time.monotonic() < deadline, "the process did not start"


@pytest.fixture
def other_users_python():
    if os.geteuid() != 0:
        pytest.skip("creating a second user needs root")
    # a Python that user can run (the test's own may sit in a directory only root can enter)
    python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3")
                   if os.access(p, os.X_OK)), None)
    if python is None:
        pytest.skip("no system python3 for the second user")
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        r = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot create a user here: {r.stderr.strip()}")
        created = True
    proc = None
    try:
        proc = subprocess.Popen([python, "-u", "-c", "import time; print('READY'); "
                                 "time.sleep(120)"], user=USER, stdout=subprocess.PIPE,
                                text=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
        wait_started(proc)
        yield proc
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        if created:
            subprocess.run(["userdel", USER], capture_output=True)


def test_root_into_another_users_process(cli, other_users_python):
    pid = other_users_python.pid
    uid = pwd.getpwnam(USER).pw_uid
    r = cli(pid, "inject", "--timeout", "5", check=False)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        f"probing: process {pid} belongs to user {USER} (uid {uid}), not to root: its agent "
        "would serve from that user's socket directory, which probing run as root does not use, "
        f"and could not answer into root's; run inject as that user: sudo -u {USER} probing "
        f"{pid} inject; nothing was changed\n")
    assert other_users_python.poll() is None


FAKE = r"""
#include <stdio.h>
#include <unistd.h>
int Py_AddPendingCall(int (*fn)(void *), void *arg) { (void)fn; (void)arg; return 0; }
int PyRun_SimpleString(const char *s) { (void)s; return 0; }
int main(void) { printf("READY\n"); fflush(stdout); sleep(120); return 0; }
"""


def test_a_python_probing_does_not_support(cli, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the fake python3.6")
    (tmp_path / "fake.c").write_text(FAKE)
    exe = tmp_path / "python3.6"
    subprocess.run([cc, "-rdynamic", "-o", exe, tmp_path / "fake.c"], check=True, timeout=120)
    proc = subprocess.Popen([exe], stdout=subprocess.PIPE, text=True)
    try:
        wait_started(proc)
        r = cli(proc.pid, "inject", "--timeout", "5", check=False)
        assert (r.returncode, r.stdout, r.stderr) == (
            1, "", f"probing: process {proc.pid} runs Python 3.6, which probing does not support "
                   "(it needs CPython 3.9 or newer); nothing was changed\n")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
