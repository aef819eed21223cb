"""probing: a live profiler for PyTorch. The agent is C (probing._agent); this file starts it.

    import probing          # starts the agent (unless PROBING=0)
    probing.init()          # the same, explicitly; idempotent; returns the socket path

`probing run -- python train.py` and `PROBING=1 python train.py` do this for you.
"""
import os
import sys

from . import _agent

__all__ = ["init", "stop", "endpoint", "frame"]
__version__ = _agent.__version__


def _is_worker_child():
    """True in multiprocessing's spawn/forkserver helper processes (DataLoader workers with the
    spawn context and the like): they inherit PROBING=1 but must run exactly as before."""
    argv = getattr(sys, "orig_argv", sys.argv) or []
    text = " ".join(argv)
    return "--multiprocessing-fork" in text or "from multiprocessing." in text


_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def _command_line():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return list(getattr(sys, "orig_argv", sys.argv) or [])


def _is_launcher():
    """True in torchrun (or python -m torch.distributed.run/launch): it only starts the ranks,
    which run the training and get their own agents; an agent here would show the launcher in
    `probing list` and leave an empty recording."""
    argv = _command_line()
    for i, arg in enumerate(argv[:3]):
        if os.path.basename(arg) == "torchrun" and i <= 1:
            return True
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] in _LAUNCHER_MODULES:
            return True
        if arg.startswith("-m") and arg[2:] in _LAUNCHER_MODULES:
            return True
    return False


# Processes torch.compile's Inductor starts for itself: its CPU-ISA probe (`python -c` that only
# loads a test library, cpu_vec_isa.py) and its compile workers. They train nothing; an agent in
# each would cost their start and, under `run -o`, leave a run.pid<P>.db per probe.
_TORCH_HELPER_CODE = ("from ctypes import cdll\ncdll.LoadLibrary(",)
_TORCH_HELPER_SCRIPTS = (os.path.join("torch", "_inductor", "compile_worker", "__main__.py"),)


def _is_torch_helper():
    """True in a helper process of torch's own (above), where no agent starts."""
    argv = _command_line()
    for i, arg in enumerate(argv[1:3], 1):
        if arg == "-c" and i + 1 < len(argv):
            return any(code in argv[i + 1] for code in _TORCH_HELPER_CODE)
        if arg.endswith(_TORCH_HELPER_SCRIPTS):
            return True
    return False


def _tell_where_ranks_recorded(template, started, pid):
    """At the launcher's exit: names the recordings its ranks wrote (docs/recordings.md)."""
    import glob

    if os.getpid() != pid:  # a fork()ed helper of the launcher
        return

    if "%" in template:
        pattern = template.replace("%%", "\0").replace("%r", "*").replace("%h", "*")
        pattern = pattern.replace("%p", "*").replace("\0", "%")
    else:
        head, ext = os.path.splitext(template)
        if not ext or os.sep in ext:
            head, ext = template, ""
        pattern = head + ".rank*" + ext
    try:
        files = sorted(f for f in glob.glob(pattern) if os.path.getmtime(f) >= started - 1
                       and not f.endswith("-journal"))
    except OSError:
        return
    if files:
        sys.stderr.write("probing: the ranks recorded into %s (read them with: probing %s "
                         "report)\n" % (", ".join(files), files[0]))
    else:
        sys.stderr.write("probing: no rank wrote a recording matching %s\n" % pattern)


def _start_with_process_group():
    """In a multiprocessing child (spawn/forkserver), start the agent only once the child calls
    torch.distributed.init_process_group: then it is a rank (torch.multiprocessing.spawn, a
    multiprocessing.Process per rank), not a DataLoader worker, which never calls it. The
    wrapper calls the original first, so the program sees the same result or exception; the
    rank and world size it passed become RANK and WORLD_SIZE when the launcher did not set
    them, so the agent names the rank as torchrun's would."""
    def wrap():
        c10d = sys.modules["torch.distributed.distributed_c10d"]
        original = c10d.init_process_group
        if getattr(original, "_probing_original", None) is not None:
            return

        def init_process_group(*args, **kwargs):
            result = original(*args, **kwargs)
            try:
                if c10d.is_initialized():
                    os.environ.setdefault("RANK", str(c10d.get_rank()))
                    os.environ.setdefault("WORLD_SIZE", str(c10d.get_world_size()))
                init()
            except Exception as exc:  # never break the user's program
                sys.stderr.write(f"probing: {exc}\n")
            return result

        init_process_group._probing_original = original
        init_process_group.__wrapped__ = original
        init_process_group.__doc__ = original.__doc__
        init_process_group.__name__ = original.__name__
        # Before torch.distributed copies c10d's names, so both see the wrapper.
        c10d.init_process_group = init_process_group

    from . import _importhook

    _importhook.when_imported("torch.distributed.distributed_c10d", wrap)


def init():
    """Starts the agent (once) and arranges for torch hooks whenever torch is imported.
    Returns the Unix socket path, or None when the agent could not start. Called explicitly
    (or by `probing <pid> inject`), it starts in any process, a multiprocessing child too."""
    if _is_launcher():
        template = os.environ.get("PROBING_RECORD", "")
        if template and not getattr(init, "_launcher_noted", False):
            import atexit
            import time

            init._launcher_noted = True
            atexit.register(_tell_where_ranks_recorded, template, time.time(), os.getpid())
        return None
    if _is_torch_helper():
        return None
    path = _agent.start()
    if path is not None:
        _note_uncaught_exceptions()
        from . import _importhook

        _importhook.when_imported("torch", _agent.install_torch_hooks)
        # Before torch.distributed copies c10d's names, so both see the recording wrappers.
        _importhook.when_imported("torch.distributed.distributed_c10d", _agent.install_distributed)
        _importhook.when_imported("torch.nn.parallel.distributed", _agent.install_ddp)
        _importhook.when_imported("transformers.generation.utils", _agent.install_generate)
        # python.requests: the standard library's HTTP server, and uvicorn's ASGI applications
        _importhook.when_imported("http.server", _agent.install_http_server)
        _importhook.when_imported("uvicorn.config", _agent.install_uvicorn)
        _importhook.when_imported("torch._dynamo.config", _tell_dynamo)
        from . import _compiles

        _importhook.when_imported("torch._dynamo.utils", _compiles.install)  # python.compiles
    return path


def _note_uncaught_exceptions():
    """Wraps sys.excepthook (once) so the exception that ends the program goes into the
    recording's probe.run row; the previous hook then runs as before (same output)."""
    previous = sys.excepthook
    if getattr(previous, "_probing", False):
        return

    def hook(exc_type, value, tb):
        try:
            import traceback

            _agent.note_exception(getattr(exc_type, "__qualname__", str(exc_type)),
                                  str(value), "".join(traceback.format_exception(exc_type, value, tb)))
        except BaseException:
            pass
        previous(exc_type, value, tb)

    hook._probing = True
    sys.excepthook = hook


def _tell_dynamo():
    """torch.compile must treat probing's hooks as no-ops instead of breaking its graph on them
    (they only observe; inside a compiled region the compiled graph is what runs)."""
    config = sys.modules["torch._dynamo.config"]
    ignored = getattr(config, "ignore_logging_functions", None)
    if ignored is None:
        ignored = getattr(config, "ignore_logger_methods", None)
    if ignored is not None:
        ignored.update(_agent.hook_functions())


def stop():
    """Removes every hook, stops the agent's threads and server, frees its memory."""
    _agent.stop()


def frame(function=None, thread=None):
    """The local variables of a running function, for `probing <pid> eval`: eval runs in
    `__main__`, but training code mostly keeps `model` and the loader inside `main()`.

        probing <pid> eval "import probing; print(probing.frame('main')['model'])"

    function: the function's name (`main`, `train`, `Trainer.train` matches a method too); the
    innermost frame running it is used. None: the innermost frame that is not probing's, torch's
    or the standard library's threading code. thread: a thread name or ident; default the main
    thread. Returns a dict copy of the frame's locals (read it; assigning to it changes nothing
    in the program). Raises LookupError naming the functions that are running when none
    matches."""
    import threading

    if thread is None:
        ident = threading.main_thread().ident
    elif isinstance(thread, int):
        ident = thread
    else:
        named = [t.ident for t in threading.enumerate() if t.name == thread]
        if not named:
            have = ", ".join(sorted(t.name for t in threading.enumerate()))
            raise LookupError(f"no thread named {thread!r}; threads: {have}")
        ident = named[0]
    f = sys._current_frames().get(ident)
    if f is None:
        raise LookupError(f"thread {thread if thread is not None else 'MainThread'} is not running Python code")
    seen = []
    while f is not None:
        code = f.f_code
        qual = getattr(code, "co_qualname", code.co_name)
        mod = f.f_globals.get("__name__", "")
        if function is None:
            if not (mod.startswith(("probing", "torch", "threading")) or code.co_filename.startswith("<")):
                return dict(f.f_locals)
        elif function in (code.co_name, qual):
            return dict(f.f_locals)
        seen.append(qual)
        f = f.f_back
    what = "frame of the program" if function is None else f"running function {function!r}"
    raise LookupError(f"no {what} in that thread; it runs (innermost first): "
                      f"{', '.join(seen) or 'nothing'}")


def endpoint():
    """The Unix socket path the agent listens on, or None."""
    return _agent.endpoint()


if os.environ.get("PROBING", "") != "0":
    if _is_worker_child():
        _start_with_process_group()
    else:
        init()
