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


def init():
    """Starts the agent (once) and arranges for torch hooks whenever torch is imported.
    Returns the Unix socket path, or None when the agent could not start."""
    if _is_worker_child():
        return None
    path = _agent.start()
    if path is not None:
        from . import _importhook

        _importhook.when_imported("torch", _agent.install_torch_hooks)
        # Before torch.distributed copies c10d's names, so both see the recording wrappers.
        _importhook.when_imported("torch.distributed.distributed_c10d", _agent.install_distributed)
        _importhook.when_imported("torch.nn.parallel.distributed", _agent.install_ddp)
        _importhook.when_imported("torch._dynamo.config", _tell_dynamo)
    return path


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
    init()
