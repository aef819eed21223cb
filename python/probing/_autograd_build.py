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

The cache is trusted only as far as it is the user's own (docs/security.md, "The build cache").
The cache root, autograd/ and the key folder are opened one at a time, each relative to the
one above (O_NOFOLLOW, O_DIRECTORY), and each must be a directory of the user's (the effective
uid), not writable by group or others; what probing creates there is 0700 whatever the umask.
The shared object is opened with O_NOFOLLOW|O_NONBLOCK (a FIFO there cannot hang the training
thread) and must be a regular file of the user's, not writable by group or others; it is then
imported through /proc/self/fd/N, so the dynamic loader maps the very file that was checked,
whatever the name points to by then. Anything else is refused: one warning on stderr (the
agent prints the third element of load()'s answer), and backward is timed by the Python-level
probes. The build writes under a random temporary name in the checked key folder (reached by
the builder through the folder's descriptor, never its path) and renames it into place;
build.lock, build.log and failed are opened with O_NOFOLLOW and, when new, O_EXCL.
"""
import errno
import hashlib
import os
import secrets
import shutil
import stat
import subprocess
import sys
import sysconfig
import time

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autograd_src")
SOURCES = ("autograd.cpp", "autograd_api.h")
LOCK_STALE_S = 1800  # a build lock older than this belongs to a build that died
# as meson builds it with the package (release: -O3, NDEBUG); part of the cache key
FLAGS = ["-O3", "-DNDEBUG", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-w"]
# a folder of the cache, an existing file in it (a FIFO opens at once and is then refused), a new file
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_warned = False  # the refusal is said once a process


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
    return os.path.join(os.path.abspath(cache_root()), "autograd", key)


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


class Refused(Exception):
    """A folder or file of the cache that someone else could have made or changed; str() is the
    sentence the user reads: which path, why, and what to do."""


def _refuse(path, why, directory):
    remove = "rm -r" if directory else "rm"
    return Refused("%s %s; probing loads no code from it: remove it (%s %s) or set PROBING_CACHE_DIR "
                   "to a folder of your own" % (path, why, remove, path))


def _kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "of an unknown kind"


def _check(fd, path, directory):
    """Raises Refused unless what fd holds is a directory (else a regular file) of this user's,
    not writable by group or others. [no waiting: fstat]"""
    st = os.fstat(fd)
    me = os.geteuid()
    if directory and not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is not a directory", directory)
    if not directory and not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is %s, not a regular file" % _kind(st.st_mode), directory)
    if st.st_uid != me:
        raise _refuse(path, "belongs to uid %d, not to you (uid %d): its owner could have put code in it"
                      % (st.st_uid, me), directory)
    if st.st_mode & 0o022:
        raise _refuse(path, "is writable by %s (mode %04o): they could have put code in it" % (
            "everyone" if st.st_mode & 0o002 else "its group", stat.S_IMODE(st.st_mode)), directory)


def _open(name, dir_fd, path, directory):
    """An fd of name (relative to dir_fd, or absolute with dir_fd None), checked by _check; path
    is its full name for messages. FileNotFoundError when there is none; Refused when it is a
    symbolic link, of the wrong kind, someone else's, writable by others or cannot be opened.
    The caller closes the fd. [no waiting: O_NONBLOCK, so a FIFO is opened at once and then refused]"""
    try:
        fd = os.open(name, _DIR_FLAGS if directory else _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP, ENOTDIR, ENXIO (a socket), EACCES: say what is there
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise _refuse(path, "is a symbolic link: whoever made it can point it at anything", directory)
        if st is not None and (directory != stat.S_ISDIR(st.st_mode) or not (directory or stat.S_ISREG(st.st_mode))):
            raise _refuse(path, "is %s, not a %s" % (_kind(st.st_mode), "directory" if directory else "regular file"),
                          directory)
        raise _refuse(path, "cannot be opened (%s)" % (exc.strerror or exc), directory)
    try:
        _check(fd, path, directory)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_dir(dir_fd, name, path, create):
    """_open of a folder, made first (0700, whatever the umask) when create and it is not there."""
    try:
        return _open(name, dir_fd, path, True)
    except FileNotFoundError:
        if not create:
            raise
    if dir_fd is None:
        os.makedirs(os.path.dirname(name), 0o700, exist_ok=True)
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
        made = True
    except FileExistsError:  # another rank made it: checked like any other
        made = False
    fd = _open(name, dir_fd, path, True)
    if made:
        os.fchmod(fd, 0o700)  # a umask can only take bits away: give the owner's back
    return fd


def _open_key_dir(d, create):
    """An fd of the key folder d = <cache root>/autograd/<key>, reached from the cache root one
    folder at a time, each checked (_open); made 0700 on the way when create. Raises
    FileNotFoundError (create false) or Refused. The caller closes the fd."""
    root = os.path.dirname(os.path.dirname(d))
    fd = _open_dir(None, root, root, create)
    path = root
    for name in ("autograd", os.path.basename(d)):
        path = os.path.join(path, name)
        try:
            sub = _open_dir(fd, name, path, create)
        finally:
            os.close(fd)
        fd = sub
    return fd


def _exists(dir_fd, name):
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except OSError:
        return False


def _building(kfd):
    """Whether a build in the key folder open at kfd is under way (a live process holds its lock)."""
    try:
        fd = os.open("build.lock", _FILE_FLAGS, dir_fd=kfd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        pid = int(os.read(fd, 32).strip() or 0)
        age = time.time() - st.st_mtime
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)
    if pid == 0:  # just made: its builder is starting
        return age < 60
    return _pid_alive(pid) and age < LOCK_STALE_S


def _state(torch):
    """(state, folder, text, key_fd, so_fd) without building or making anything: state is
    "built", "building", "failed", "refused", "absent" or "unbuildable"; text says what is there,
    why it is refused or what would enable it. key_fd (the checked key folder) and so_fd (the
    checked shared object, "built" only) are None or open: the caller closes them."""
    d = build_dir(torch)
    version = _torch_facts(torch)[2]
    try:
        kfd = _open_key_dir(d, False)
    except FileNotFoundError:
        kfd = None
    except Refused as exc:
        return "refused", d, str(exc), None, None
    if kfd is not None:
        try:
            so_fd = _open(_so_name(), kfd, os.path.join(d, _so_name()), False)
            return "built", d, "built on first use into %s" % d, kfd, so_fd
        except FileNotFoundError:
            pass
        except BaseException as exc:
            os.close(kfd)
            if isinstance(exc, Refused):
                return "refused", d, str(exc), None, None
            raise
        if _building(kfd):
            return "building", d, "being built for torch %s into %s; the agent switches to it when it is there" % (
                version, d), kfd, None
        if _exists(kfd, "failed"):
            return "failed", d, "building it failed, see %s (remove that folder to retry)" % os.path.join(
                d, "build.log"), kfd, None
    why = missing(torch)
    if why:
        return "unbuildable", d, why, kfd, None
    return "absent", d, "not built yet for torch %s; the first run with torch hooks builds it into %s" % (
        version, d), kfd, None


def status(torch):
    """(state, folder, text) without building: state is "built", "building", "failed",
    "refused", "absent" or "unbuildable"; text says what is there or what would enable it."""
    state, d, text, kfd, so_fd = _state(torch)
    for fd in (so_fd, kfd):
        if fd is not None:
            os.close(fd)
    return state, d, text


def _import(so_fd):
    """Imports the shared object open at so_fd (checked by _open) as probing._autograd, through
    /proc/self/fd/N: the dynamic loader opens that very file, not whatever its name in the cache
    points to by now (no check-then-open race), and reads it in place (no copy). glibc and
    CPython remember a loaded object by that name; a later import under the same name can only
    give back one that was checked the same way."""
    import importlib.machinery
    import importlib.util

    via = "/proc/self/fd/%d" % so_fd
    if not os.path.exists(via):
        raise ImportError("/proc is not mounted here, and a cached build is loaded only through /proc/self/fd")
    loader = importlib.machinery.ExtensionFileLoader("probing._autograd", via)
    spec = importlib.util.spec_from_file_location("probing._autograd", via, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules["probing._autograd"] = module
    setattr(sys.modules["probing"], "_autograd", module)  # PyCapsule_Import reads it from there
    return module


def _start_build(kfd, d, torch):
    """Starts the background build into the key folder d, open and checked at kfd, unless one
    runs; returns a sentence. The builder gets the folder's descriptor, not its path."""
    torch_dir, abi, version = _torch_facts(torch)
    busy = "python (probing._autograd is being built for torch %s into %s; the agent switches to it when it is there)" % (
        version, d)
    if _building(kfd):
        return busy
    try:
        os.unlink("build.lock", dir_fd=kfd)  # stale: its process is gone
    except OSError:
        pass
    try:
        lock = os.open("build.lock", _NEW_FLAGS, 0o600, dir_fd=kfd)
    except FileExistsError:  # another rank won the race
        return busy
    env = dict(os.environ)
    env["PROBING"] = "0"  # the compiler's Python is no training job
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = package_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    log = None
    try:
        try:
            os.unlink("build.log", dir_fd=kfd)  # an earlier build's, which died: a new log
        except FileNotFoundError:
            pass
        log = os.open("build.log", _NEW_FLAGS | os.O_APPEND, 0o600, dir_fd=kfd)
        child = subprocess.Popen(
            [sys.executable, "-m", "probing._autograd_build", str(kfd), d, torch_dir, abi, version],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, close_fds=True, pass_fds=(kfd,))
        os.write(lock, str(child.pid).encode())
    except OSError as exc:
        os.close(lock)
        lock = None
        try:
            os.unlink("build.lock", dir_fd=kfd)
        except OSError:
            pass
        return "python (probing._autograd could not be built: %s)" % exc
    finally:
        for fd in (lock, log):
            if fd is not None:
                os.close(fd)
    return busy


def load(torch):
    """Called by the agent when `import probing._autograd` found no module: imports a cached
    build for this torch, or starts one in the background. Returns (text, pending, warning):
    text is None when probing._autograd is now importable, else what the agent shows as its
    backward path on the Python probes; pending is the file a build under way will write (the
    agent switches to it at a step boundary once it is there), else None; warning is the
    sentence the agent prints on stderr when the cache is refused (once a process), else None.
    Never raises. [GIL held, training thread; no waiting: nothing here blocks on a cache file]"""
    global _warned
    kfd = so_fd = None
    try:
        try:
            state, d, text, kfd, so_fd = _state(torch)
            if state == "built":
                try:
                    _import(so_fd)
                    return None, None, None
                except ImportError as exc:
                    return "python (probing._autograd in %s not usable: %s)" % (d, exc), None, None
            if state in ("failed", "unbuildable"):
                return "python (probing._autograd not built: %s)" % text, None, None
            if state != "refused":
                if os.environ.get("PROBING_AUTOGRAD_BUILD", "1").strip() == "0":
                    return "python (probing._autograd not built: PROBING_AUTOGRAD_BUILD=0)", None, None
                if kfd is None:
                    kfd = _open_key_dir(d, True)
                text = _start_build(kfd, d, torch)
                return text, os.path.join(d, _so_name()) if "being built" in text else None, None
        except Refused as exc:
            text = str(exc)
        warning = None if _warned else "not using the build cache of probing._autograd: %s" % text
        _warned = True
        return "python (probing._autograd's build cache refused: %s)" % text, None, warning
    except Exception as exc:  # never into the user's program
        return "python (probing._autograd not built: %s)" % exc, None, None
    finally:
        for fd in (so_fd, kfd):
            if fd is not None:
                os.close(fd)


def _temporary(kfd):
    """A new file of ours under a random name in the key folder (as mkstemp): its name."""
    for _ in range(100):
        name = ".%s.%s.tmp" % (_so_name(), secrets.token_hex(8))
        try:
            os.close(os.open(name, _NEW_FLAGS, 0o600, dir_fd=kfd))
            return name
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temporary name in the build folder")


def _build(kfd, d, torch_dir, abi, version):
    """The child: compiles the shim into the key folder open at kfd (d is its name, for the log)
    under a temporary name, reached as /proc/self/fd/<kfd>/<name> by the compiler (which
    inherits the fd), then renames it into place (readers see the whole file or none).
    Returns the exit status."""
    try:
        os.nice(10)  # after the training job
    except OSError:
        pass
    os.umask(0o077)  # what the compiler and linker make is the user's only
    _check(kfd, d, True)
    py_include = sysconfig.get_paths()["include"]
    cxx = compiler()
    if not cxx:
        sys.stderr.write("probing: no C++ compiler found (install g++, or set CXX)\n")
        return 1
    tmp = _temporary(kfd)
    out = "/proc/self/fd/%d/%s" % (kfd, tmp)
    cmd = cxx.split() + FLAGS + [
        "-D_GLIBCXX_USE_CXX11_ABI=" + abi, '-DPB_TORCH_VERSION="%s"' % version,
        "-I", SOURCE_DIR, "-isystem", py_include,
        "-isystem", os.path.join(torch_dir, "include"),
        "-isystem", os.path.join(torch_dir, "include", "torch", "csrc", "api", "include"),
        os.path.join(SOURCE_DIR, "autograd.cpp"), "-o", out,
        # no rpath: the agent imports it after torch, whose libraries are then loaded
        "-L" + os.path.join(torch_dir, "lib"), "-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10",
    ]
    sys.stdout.write("%s probing: building probing._autograd for torch %s (%s is %s)\n$ %s\n" % (
        time.strftime("%Y-%m-%d %H:%M:%S"), version, "/proc/self/fd/%d" % kfd, d, " ".join(cmd)))
    sys.stdout.flush()
    start = time.monotonic()
    rc = subprocess.call(cmd, pass_fds=(kfd,))
    if rc == 0:
        try:  # what the compiler wrote: a regular file of ours, then 0700 and into place
            fd = _open(tmp, kfd, os.path.join(d, tmp), False)
            try:
                os.fchmod(fd, 0o700)
            finally:
                os.close(fd)
            os.replace(tmp, _so_name(), src_dir_fd=kfd, dst_dir_fd=kfd)
            sys.stdout.write("built %s in %.0f s\n" % (os.path.join(d, _so_name()), time.monotonic() - start))
            return 0
        except (OSError, Refused) as exc:
            rc = "its output unusable: %s" % exc
    try:
        os.unlink(tmp, dir_fd=kfd)
    except OSError:
        pass
    why = "compiler exit status %d" % rc if isinstance(rc, int) else rc
    try:
        fd = os.open("failed", _NEW_FLAGS, 0o600, dir_fd=kfd)  # never through a link, never truncating
        try:
            os.write(fd, (why + "\n").encode())
        finally:
            os.close(fd)
    except OSError as exc:
        sys.stdout.write("cannot write %s: %s\n" % (os.path.join(d, "failed"), exc))
    sys.stdout.write("failed: %s\n" % why)
    return 1


def main(argv):
    if len(argv) != 6 or not argv[1].isdigit():
        sys.stderr.write("usage: python -m probing._autograd_build DIR_FD DIR TORCH_DIR ABI TORCH_VERSION\n")
        return 2
    kfd = int(argv[1])
    try:
        return _build(kfd, argv[2], argv[3], argv[4], argv[5])
    except (OSError, Refused) as exc:
        sys.stdout.write("failed: %s\n" % exc)
        return 1
    finally:
        try:
            os.unlink("build.lock", dir_fd=kfd)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
