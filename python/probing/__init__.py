"""probing: a live profiler for PyTorch. The agent is C (probing._agent); this file starts it.

    import probing          # starts the agent (unless PROBING=0)
    probing.init()          # the same, explicitly; idempotent; returns the socket path

`probing run -- python train.py` and `PROBING=1 python train.py` do this for you.
"""
import os
import sys

from . import _agent

__all__ = ["init", "stop", "endpoint"]
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


def endpoint():
    """The Unix socket path the agent listens on, or None."""
    return _agent.endpoint()


if os.environ.get("PROBING", "") != "0":
    init()
