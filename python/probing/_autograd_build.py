"""probing._autograd built on first use, against the torch that is running.

`pip install .` builds probing in an isolated environment without torch, so the C++ shim
probing._autograd (src/autograd, docs/tables.md "Backward probes") cannot be built with the
package. The package ships its source (probing/_autograd_src/), and the first time the agent
installs its torch hooks without the shim it calls load() here, which, like
torch.utils.cpp_extension and DeepSpeed's ops:

- looks in a cache for a build made for this very torch: the folder is keyed by torch's version,
  its C++ ABI flag, the Python ABI tag, probing's version and a hash of the shim's source and
  the compiler flags;
- if there is one, imports it as probing._autograd and the agent uses it (the fast path);
- if there is none, starts one compiler process in the background (a child process in its own
  session, at low priority, never waited for by the training thread) and returns at once: this
  run times backward with the Python-level probes until the build is there: the agent looks for
  it every 16 steps and switches at a step boundary; later runs under the same torch start with
  it. A build that failed is not retried until its folder is removed (its log says why).

Cache folder: $PROBING_CACHE_DIR, else $XDG_CACHE_HOME/probing, else ~/.cache/probing; the build
goes into <cache>/autograd/<key>/. PROBING_AUTOGRAD_BUILD=0 turns building off (a cached build
is still used). The child is `python -m probing._autograd_build DIR TORCH_DIR ABI VERSION`; it
needs a C++ compiler ($CXX, else c++ or g++), torch's headers and Python's headers, and never
imports torch.

`probing doctor` reports the same state through status() without building anything.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import time

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autograd_src")
SOURCES = ("autograd.cpp", "autograd_api.h")
LOCK_STALE_S = 1800  # a build lock older than this belongs to a build that died
# as meson builds it with the package (release: -O3, NDEBUG); part of the cache key
FLAGS = ["-O3", "-DNDEBUG", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-w"]


def cache_root():
    root = os.environ.get("PROBING_CACHE_DIR")
    if root:
        return root
    xdg = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(xdg or os.path.join(os.path.expanduser("~"), ".cache"), "probing")


def _source_hash():
    h = hashlib.sha256(" ".join(FLAGS).encode())
    for name in SOURCES:
        with open(os.path.join(SOURCE_DIR, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def _torch_facts(torch):
    """(torch's folder, its C++ ABI flag as "0"/"1", torch.__version__)."""
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return os.path.dirname(os.path.abspath(torch.__file__)), str(abi), str(torch.__version__)


def _version():
    try:
        from . import _agent
        return _agent.__version__
    except Exception:  # only the key depends on it
        return "unknown"


def build_dir(torch):
    """The cache folder for this torch, Python and probing (it may not exist)."""
    _, abi, version = _torch_facts(torch)
    safe = "".join(c if c.isalnum() or c in ".-_" else "_" for c in version)
    key = "torch%s-abi%s-%s-probing%s-%s" % (safe, abi, sys.implementation.cache_tag, _version(), _source_hash())
    return os.path.join(cache_root(), "autograd", key)


def _so_name():
    return "_autograd" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def compiler():
    """The C++ compiler a build would use, or None."""
    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx.split()[0]) and cxx
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name):
            return name
    return None


def missing(torch):
    """Why no build can be made here (a sentence that says what would enable it), or None."""
    torch_dir = _torch_facts(torch)[0]
    if not all(os.path.exists(os.path.join(SOURCE_DIR, n)) for n in SOURCES):
        return "the shim's source is not installed with probing (%s)" % SOURCE_DIR
    if not os.path.exists(os.path.join(torch_dir, "include", "torch", "csrc", "autograd", "function.h")):
        return "torch at %s has no C++ headers (a torch wheel from pytorch.org or PyPI has them)" % torch_dir
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        return "no Python.h in %s (install the Python development headers, e.g. python3-dev)" % (
            sysconfig.get_paths()["include"])
    if not compiler():
        return "no C++ compiler found (install g++, or set CXX)"
    return None


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _building(d):
    """Whether a build of folder d is under way (a live process holds its lock)."""
    lock = os.path.join(d, "build.lock")
    try:
        with open(lock) as f:
            pid = int(f.read().strip() or 0)
        age = time.time() - os.path.getmtime(lock)
    except (OSError, ValueError):
        return False
    if pid == 0:  # just made: its builder is starting
        return age < 60
    return _pid_alive(pid) and age < LOCK_STALE_S


def status(torch):
    """(state, folder, text) without building: state is "built", "building", "failed",
    "absent" or "unbuildable"; text says what is there or what would enable it."""
    d = build_dir(torch)
    if os.path.exists(os.path.join(d, _so_name())):
        return "built", d, "built on first use into %s" % d
    if _building(d):
        return "building", d, "being built for torch %s into %s; the agent switches to it when it is there" % (_torch_facts(torch)[2], d)
    if os.path.exists(os.path.join(d, "failed")):
        return "failed", d, "building it failed, see %s (remove that folder to retry)" % os.path.join(d, "build.log")
    why = missing(torch)
    if why:
        return "unbuildable", d, why
    return "absent", d, "not built yet for torch %s; the first run with torch hooks builds it into %s" % (
        _torch_facts(torch)[2], d)


def _import(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("probing._autograd", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["probing._autograd"] = module
    setattr(sys.modules["probing"], "_autograd", module)  # PyCapsule_Import reads it from there
    return module


def _start_build(d, torch):
    """Starts the background build of folder d unless one runs; returns a sentence."""
    torch_dir, abi, version = _torch_facts(torch)
    os.makedirs(d, exist_ok=True)
    lock = os.path.join(d, "build.lock")
    if _building(d):
        return "python (probing._autograd is being built for torch %s into %s; the agent switches to it when it is there)" % (version, d)
    try:
        os.unlink(lock)  # stale: its process is gone
    except OSError:
        pass
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:  # another rank won the race
        return "python (probing._autograd is being built for torch %s into %s; the agent switches to it when it is there)" % (version, d)
    env = dict(os.environ)
    env["PROBING"] = "0"  # the compiler's Python is no training job
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = package_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        with open(os.path.join(d, "build.log"), "ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "probing._autograd_build", d, torch_dir, abi, version],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, close_fds=True)
        os.write(fd, str(child.pid).encode())
    except OSError as exc:
        os.close(fd)
        os.unlink(lock)
        return "python (probing._autograd could not be built: %s)" % exc
    os.close(fd)
    return "python (probing._autograd is being built for torch %s into %s; the agent switches to it when it is there)" % (version, d)


def load(torch):
    """Called by the agent when `import probing._autograd` found no module: imports a cached
    build for this torch, or starts one in the background. Returns (text, pending): text is
    None when probing._autograd is now importable, else what the agent shows as its backward
    path on the Python probes; pending is the file a build under way will write (the agent
    switches to it at a step boundary once it is there), else None. Never raises.
    [GIL held, training thread; no waiting]"""
    try:
        d = build_dir(torch)
        so = os.path.join(d, _so_name())
        if os.path.exists(so):
            try:
                _import(so)
                return None, None
            except ImportError as exc:
                return "python (probing._autograd in %s not usable: %s)" % (d, exc), None
        state, d, text = status(torch)
        if state in ("failed", "unbuildable"):
            return "python (probing._autograd not built: %s)" % text, None
        if os.environ.get("PROBING_AUTOGRAD_BUILD", "1").strip() == "0":
            return "python (probing._autograd not built: PROBING_AUTOGRAD_BUILD=0)", None
        text = _start_build(d, torch)
        return text, so if "being built" in text else None
    except Exception as exc:  # never into the user's program
        return "python (probing._autograd not built: %s)" % exc, None


def _build(d, torch_dir, abi, version):
    """The child: compiles the shim into d/<name>.so through a temporary file (readers see the
    whole file or none). Returns the exit status."""
    try:
        os.nice(10)  # after the training job
    except OSError:
        pass
    out = os.path.join(d, _so_name())
    tmp = out + ".%d.tmp" % os.getpid()
    py_include = sysconfig.get_paths()["include"]
    cxx = compiler()
    if not cxx:
        sys.stderr.write("probing: no C++ compiler found (install g++, or set CXX)\n")
        return 1
    cmd = cxx.split() + FLAGS + [
        "-D_GLIBCXX_USE_CXX11_ABI=" + abi, '-DPB_TORCH_VERSION="%s"' % version,
        "-I", SOURCE_DIR, "-isystem", py_include,
        "-isystem", os.path.join(torch_dir, "include"),
        "-isystem", os.path.join(torch_dir, "include", "torch", "csrc", "api", "include"),
        os.path.join(SOURCE_DIR, "autograd.cpp"), "-o", tmp,
        # no rpath: the agent imports it after torch, whose libraries are then loaded
        "-L" + os.path.join(torch_dir, "lib"), "-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10",
    ]
    sys.stdout.write("%s probing: building probing._autograd for torch %s\n$ %s\n" % (
        time.strftime("%Y-%m-%d %H:%M:%S"), version, " ".join(cmd)))
    sys.stdout.flush()
    start = time.monotonic()
    rc = subprocess.call(cmd)
    if rc == 0:
        os.replace(tmp, out)
        sys.stdout.write("built %s in %.0f s\n" % (out, time.monotonic() - start))
    else:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        with open(os.path.join(d, "failed"), "w") as f:
            f.write("compiler exit status %d\n" % rc)
        sys.stdout.write("failed: compiler exit status %d\n" % rc)
    return 0 if rc == 0 else 1


def main(argv):
    if len(argv) != 5:
        sys.stderr.write("usage: python -m probing._autograd_build DIR TORCH_DIR ABI TORCH_VERSION\n")
        return 2
    d = argv[1]
    try:
        return _build(d, argv[2], argv[3], argv[4])
    finally:
        try:
            os.unlink(os.path.join(d, "build.lock"))
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
