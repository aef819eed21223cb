"""Started by `probing run`, which puts this directory first on PYTHONPATH.

Starts the probing agent when PROBING is set, then hands over to whatever sitecustomize the
interpreter would otherwise have loaded, so a user's own sitecustomize still runs.
"""
import os
import sys


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    saved = sys.modules.pop("sitecustomize", None)
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    old = sys.path
    try:
        sys.path = path
        import importlib.util

        spec = importlib.util.find_spec("sitecustomize")
        if spec is not None and spec.loader is not None:
            mod = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = mod
            spec.loader.exec_module(mod)
            return
    except Exception as exc:  # the user's sitecustomize failed: report like site.py would
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{exc!r}\n")
    finally:
        sys.path = old
    if saved is not None:
        sys.modules["sitecustomize"] = saved


if os.environ.get("PROBING", "0") not in ("", "0"):
    try:
        import probing  # noqa: F401  (importing starts the agent)
    except Exception as exc:  # never stop the user's program
        sys.stderr.write(f"probing: could not start the agent: {exc}\n")
_chain()
