"""The first-use build cache of probing._autograd (python/probing/_autograd_build.py; docs/security.md,
"The build cache"; issue 49 items 1-3): a cache that another local user could have made or
changed is refused with one warning, the shared object loaded is the very file that was
checked, nothing in the cache is followed through a link or truncated, a FIFO cannot hang the
job, and what probing makes there is the user's only whatever the umask.

Most cases call _autograd_build's functions in a fresh Python with a torch-like object (no torch
import: a few tenths of a second each) and a planted shared object whose constructor leaves a
mark when anything loads it, as the attacker's did. One real training process checks that a
FIFO at the shared object's name costs the job nothing but the warning. Run as root (as CI
does), "another user" is uid 65534."""
import json
import os
import shutil
import stat
import subprocess
import sysconfig
import textwrap
import time

import pytest

from conftest import PYTHON

OTHER_UID = 65534
FAKE_TORCH = textwrap.dedent("""\
    import json, os, sys, types
    import probing._autograd_build as b
    torch = types.SimpleNamespace(__file__=os.environ["FAKE_TORCH_DIR"] + "/__init__.py", __version__="9.9.9+fake",
                                  _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True))
""")
PLANTED_C = textwrap.dedent("""\
    #include <Python.h>
    #include <fcntl.h>
    #include <stdlib.h>
    #include <unistd.h>
    __attribute__((constructor)) static void planted(void)
    {
        const char *mark = getenv("PLANTED_MARK");
        if (mark) close(open(mark, O_WRONLY | O_CREAT, 0644));
    }
    static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_autograd", NULL, -1, NULL};
    PyMODINIT_FUNC PyInit__autograd(void) { return PyModule_Create(&def); }
""")
# a compiler that copies the planted object to its -o file, as a real one would write it
FAKE_CXX = "import os, shutil, sys\nshutil.copyfile(os.environ['PLANTED_SO'], sys.argv[sys.argv.index('-o') + 1])\n"


@pytest.fixture(scope="module")
def box(tmp_path_factory, env):
    """A fake torch folder (the headers missing() looks for), the planted shared object, the
    fake compiler, and the environment for the Pythons that call _autograd_build."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the planted shared object")
    root = tmp_path_factory.mktemp("cachebox")
    os.chmod(root, 0o755)
    torch_dir = root / "torch"
    (torch_dir / "include" / "torch" / "csrc" / "autograd").mkdir(parents=True)
    (torch_dir / "include" / "torch" / "csrc" / "autograd" / "function.h").write_text("")
    (root / "planted.c").write_text(PLANTED_C)
    so = root / "planted.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", so, root / "planted.c", "-I", sysconfig.get_paths()["include"]],
                   check=True, capture_output=True, timeout=120)
    (root / "fake_cxx.py").write_text(FAKE_CXX)
    e = dict(env)
    e.update(PROBING="0", FAKE_TORCH_DIR=str(torch_dir), PLANTED_SO=str(so), CXX="false")
    return {"root": root, "so": so, "env": e, "n": [0]}


def case(box):
    """A fresh cache root (not yet made), its key folder and shared object names, the mark."""
    box["n"][0] += 1
    base = box["root"] / ("case%d" % box["n"][0])
    base.mkdir(mode=0o755)
    env = dict(box["env"], PROBING_CACHE_DIR=str(base / "cache"), PLANTED_MARK=str(base / "mark"))
    names = call(env, "print(json.dumps([b.build_dir(torch), b._so_name()]))")
    return base, env, names[0], os.path.join(names[0], names[1])


def call(env, code, umask=None, timeout=30):
    """Runs code after FAKE_TORCH in a fresh Python; returns the JSON it prints. A call that hangs
    (a FIFO opened for reading waits for a writer) fails the test after `timeout` s."""
    try:
        r = subprocess.run([PYTHON, "-c", FAKE_TORCH + code], env=env, capture_output=True, text=True,
                           timeout=timeout, preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)
    except subprocess.TimeoutExpired:
        pytest.fail("_autograd_build hung for %d s" % timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


# load()'s (text, pending, warning), status() and whether anything was imported
LOAD = ("r = list(b.load(torch)); print(json.dumps({'load': r, 'status': list(b.status(torch)), "
        "'imported': 'probing._autograd' in sys.modules}))")


def answer(r):
    """load()'s answer as (text, pending, warning) (warning None where load() gives none)."""
    return (list(r) + [None, None, None])[:3]


def plant(d, so, box, owner=None):
    """The attacker's files: the key folder d and a loadable shared object at so (made with
    mode 0755 like any umask-022 cache), owned by `owner` when given."""
    os.makedirs(d, mode=0o755, exist_ok=True)
    shutil.copyfile(box["so"], so)
    if owner is not None:
        for p in (so, d, os.path.dirname(d), os.path.dirname(os.path.dirname(d))):
            os.chown(p, owner, owner)


def link_key_folder(d, so, box):
    elsewhere = os.path.join(os.path.dirname(os.path.dirname(d)), "elsewhere")
    plant(elsewhere, os.path.join(elsewhere, os.path.basename(so)), box)
    os.makedirs(os.path.dirname(d))
    os.symlink(elsewhere, d)


def link_so(d, so, box):
    plant(d, so + ".real", box)
    os.symlink(so + ".real", so)


def so_dir(d, so, box):
    os.makedirs(so)


def fifo(d, so, box):
    os.makedirs(d)
    os.mkfifo(so)


def chmod(level, mode):
    def planted(d, so, box):
        plant(d, so, box)
        os.chmod([os.path.dirname(os.path.dirname(d)), os.path.dirname(d), d, so][level], mode)
    return planted


def other_owner(level):
    def planted(d, so, box):
        plant(d, so, box)
        os.chown([os.path.dirname(os.path.dirname(d)), os.path.dirname(d), d, so][level], OTHER_UID, OTHER_UID)
    return planted


# (what is planted, which path the warning names (0 root, 1 autograd/, 2 key folder, 3 the
# shared object), the reason it gives)
PLANTED = {
    "a cache root of another user, all of it hers": (lambda d, so, box: plant(d, so, box, owner=OTHER_UID), 0,
                                                    "belongs to uid %d, not to you (uid 0)" % OTHER_UID),
    "a cache root writable by everyone": (chmod(0, 0o777), 0, "is writable by everyone (mode 0777)"),
    "autograd/ writable by its group": (chmod(1, 0o775), 1, "is writable by its group (mode 0775)"),
    "a key folder of another user in our root": (other_owner(2), 2, "belongs to uid %d" % OTHER_UID),
    "a key folder that is a symbolic link": (link_key_folder, 2, "is a symbolic link"),
    "a shared object of another user": (other_owner(3), 3, "belongs to uid %d" % OTHER_UID),
    "a group-writable shared object": (chmod(3, 0o664), 3, "is writable by its group (mode 0664)"),
    "a shared object that is a symbolic link": (link_so, 3, "is a symbolic link"),
    "a directory at the shared object's name": (so_dir, 3, "is a directory, not a regular file"),
    "a FIFO at the shared object's name": (fifo, 3, "is a FIFO, not a regular file"),
}


@pytest.mark.skipif(os.geteuid() != 0, reason="planting files of another uid needs root")
@pytest.mark.parametrize("what", list(PLANTED))
def test_a_cache_someone_else_could_have_written_is_refused(box, what):
    """Each planted cache: load() loads nothing (the planted constructor leaves no mark), says
    once which path is refused, why and what to do, and the agent stays on the Python probes;
    status() (probing doctor) says the same."""
    planted, level, why = PLANTED[what]
    base, env, d, so = case(box)
    planted(d, so, box)
    r = call(env, LOAD, timeout=20)
    assert not os.path.exists(env["PLANTED_MARK"]), "the planted shared object was loaded"
    assert not r["imported"]
    (text, pending, warning), state = answer(r["load"]), r["status"]
    assert warning, r
    path = [os.path.dirname(os.path.dirname(d)), os.path.dirname(d), d, so][level]
    expected = "%s %s" % (path, why)
    assert warning.startswith("not using the build cache of probing._autograd: " + expected), warning
    assert warning.endswith("probing loads no code from it: remove it (%s %s) or set PROBING_CACHE_DIR to a folder "
                            "of your own" % ("rm" if level == 3 else "rm -r", path)), warning
    assert text.startswith("python (probing._autograd's build cache refused: " + expected), text
    assert pending is None
    assert state[0] == "refused" and state[2].startswith(expected), state


def test_the_warning_is_said_once_a_process(box):
    base, env, d, so = case(box)
    chmod(0, 0o777)(d, so, box)
    warnings = call(env, "print(json.dumps([(list(b.load(torch)) + [None])[2] for _ in range(3)]))")
    assert warnings[0] and warnings[1:] == [None, None], warnings


def wait_build(d, timeout=60):
    deadline = time.monotonic() + timeout
    while os.path.lexists(os.path.join(d, "build.lock")):
        assert time.monotonic() < deadline, "the build did not end within %d s" % timeout
        time.sleep(0.05)


def test_the_build_appends_nothing_through_a_linked_build_log(box, tmp_path):
    """A build.log linked to a 0600 file outside: the build (a compiler that fails) appends
    nothing to it and leaves its own build.log and `failed`, 0600, and no temporary file."""
    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    base, env, d, so = case(box)
    os.makedirs(d, mode=0o700)
    os.symlink(victim, os.path.join(d, "build.log"))
    text, pending, warning = answer(call(env, "print(json.dumps(list(b.load(torch))))"))
    assert "is being built for torch 9.9.9+fake" in text and pending == so and warning is None, text
    wait_build(d)
    assert victim.read_text() == "secret\n", "the compile command was appended through the link"
    log = os.lstat(os.path.join(d, "build.log"))
    assert stat.S_ISREG(log.st_mode) and stat.S_IMODE(log.st_mode) == 0o600
    failed = os.lstat(os.path.join(d, "failed"))
    assert stat.S_ISREG(failed.st_mode) and stat.S_IMODE(failed.st_mode) == 0o600
    assert open(os.path.join(d, "failed")).read() == "compiler exit status 1\n"
    assert sorted(os.listdir(d)) == ["build.log", "failed"], os.listdir(d)


def test_the_build_writes_nothing_through_a_linked_failed(box, tmp_path):
    """A `failed` linked to a file that does not exist yet: nothing is created through it."""
    base, env, d, so = case(box)
    os.makedirs(d, mode=0o700)
    target = tmp_path / "made-through-failed"
    os.symlink(target, os.path.join(d, "failed"))
    call(env, "print(json.dumps(list(b.load(torch))))")
    wait_build(d)
    assert not os.path.lexists(target), "`failed` was written through the link"


def test_umask_000_gives_folders_and_a_build_of_the_user_only(box):
    """Under umask 000 the cache root, autograd/ and the key folder come out 0700 and the built
    shared object neither group- nor other-writable; the next load() imports it, through the
    descriptor that was checked."""
    base, env, d, so = case(box)
    env = dict(env, CXX="%s %s" % (PYTHON, box["root"] / "fake_cxx.py"))
    first = call(env, "print(json.dumps(list(b.load(torch))))", umask=0)
    assert "is being built" in first[0], first
    wait_build(d)
    for folder in (os.path.dirname(os.path.dirname(d)), os.path.dirname(d), d):
        assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700, (folder, oct(os.lstat(folder).st_mode))
    st = os.lstat(so)
    assert stat.S_ISREG(st.st_mode) and not st.st_mode & 0o077, oct(st.st_mode)
    assert [n for n in os.listdir(d) if n.endswith(".tmp")] == []
    again = call(env, "r = list(b.load(torch)); import probing._autograd as a; "
                      "print(json.dumps(r + [a.__spec__.origin]))", umask=0)
    assert again[0] is None and again[-1].startswith("/proc/self/fd/"), again
    assert os.path.exists(env["PLANTED_MARK"]), "the user's own build was loaded"


@pytest.fixture(scope="module")
def package_without_ext(tmp_path_factory, env):
    """The probing package as the tests import it, without a probing._autograd built with it:
    the agent then looks in the build cache (as after `pip install .`)."""
    src = None
    for p in env.get("PYTHONPATH", "").split(os.pathsep):
        if p and os.path.exists(os.path.join(p, "probing", "__init__.py")):
            src = os.path.join(p, "probing")
            break
    if src is None:
        pytest.skip("the probing package is not on PYTHONPATH (an installed one is not copied)")
    parent = tmp_path_factory.mktemp("pkg")
    (parent / "probing").mkdir()
    for name in os.listdir(src):
        if not name.startswith("_autograd.") and name != "__pycache__":
            os.symlink(os.path.join(src, name), parent / "probing" / name)
    return parent


def test_a_fifo_at_the_shared_objects_name_does_not_stop_the_job(cli, launcher, env, package_without_ext,
                                                                   tmp_path):
    """A real training job whose cache holds a FIFO where the shared object goes: it reaches
    its steps on the Python probes, says why once on stderr, and `info` says it too."""
    cache = tmp_path / "cache"
    job_env = dict(env, PROBING_CACHE_DIR=str(cache), PROBING_PYTHONPATH=str(package_without_ext))
    job_env["PYTHONPATH"] = os.pathsep.join([str(package_without_ext)] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not os.path.exists(os.path.join(p, "probing"))])
    where = subprocess.run([PYTHON, "-c", "import torch, probing._autograd_build as b; "
                            "print(b.build_dir(torch)); print(b._so_name())"],
                           env={**job_env, "PROBING": "0"}, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    d, name = where.stdout.split()
    os.makedirs(d, mode=0o700)
    os.mkfifo(os.path.join(d, name))
    t = launcher.traced("edge_cases.py", "--steps", 4, env=job_env)
    t.wait_holding(timeout=120)
    backward = json.loads(cli(t.target(), "info", "-f", "json").stdout)["detail"]["backward"]
    assert backward.startswith("python (probing._autograd's build cache refused: %s/%s is a FIFO" % (d, name)), backward
    t.finish()
    warnings = [line for line in t.stderr().splitlines() if "build cache" in line]
    assert warnings == ["probing: not using the build cache of probing._autograd: %s/%s is a FIFO, not a regular "
                        "file; probing loads no code from it: remove it (rm %s/%s) or set PROBING_CACHE_DIR to a "
                        "folder of your own" % (d, name, d, name)], t.stderr()
