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
    if _is_worker_child():
        _start_with_process_group()
    else:
        init()
