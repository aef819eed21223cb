"""Started by `probing run`, which puts this directory (and only it) first on PYTHONPATH.

Starts the probing agent when PROBING is set, then hands over to whatever sitecustomize the
interpreter would otherwise have loaded, so a user's own sitecustomize still runs.

The `probing` package is loaded by its path, from PROBING_PACKAGE_DIR (set by `probing run`),
so nothing else of the environment probing was installed in becomes importable: the program
keeps its own torch. When this Python cannot load the agent (it was built for another Python
version or ABI), this says so and how to install probing for this Python; the program runs on
without probing.
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


def _load_probing(parent):
    """Imports probing from parent/probing without putting parent on sys.path. Returns False
    (after saying why on stderr) when this interpreter cannot load the built agent."""
    import glob
    import importlib.machinery
    import importlib.util

    package = os.path.join(parent, "probing")
    built = sorted(glob.glob(os.path.join(package, "_agent*.so")))
    if built and not any(os.path.basename(b)[len("_agent"):] in importlib.machinery.EXTENSION_SUFFIXES
                         for b in built):
        names = ", ".join(os.path.basename(b) for b in built)
        version = "%d.%d" % sys.version_info[:2]
        sys.stderr.write(
            "probing: cannot load the agent into this Python (%s, %s): the probing package in "
            "%s was built for another Python (%s; this one loads *%s). Install probing for this "
            "Python (%s -m pip install probing) and start the job with that environment's "
            "probing command; the program runs without probing.\n"
            % (version, sys.executable, parent, names,
               importlib.machinery.EXTENSION_SUFFIXES[0], sys.executable))
        return False
    spec = importlib.util.spec_from_file_location(
        "probing", os.path.join(package, "__init__.py"), submodule_search_locations=[package])
    module = importlib.util.module_from_spec(spec)
    sys.modules["probing"] = module
    try:
        spec.loader.exec_module(module)  # starts the agent
    except BaseException:
        sys.modules.pop("probing", None)
        raise
    return True


if os.environ.get("PROBING", "0") not in ("", "0"):
    try:
        parent = os.environ.get("PROBING_PACKAGE_DIR", "")
        if "probing" in sys.modules:
            pass  # the environment's own probing (its probing.pth) has started the agent
        elif parent and os.path.isfile(os.path.join(parent, "probing", "__init__.py")):
            _load_probing(parent)
        else:
            import probing  # noqa: F401  (importing starts the agent)
    except Exception as exc:  # never stop the user's program
        sys.stderr.write("probing: could not start the agent: %s\n" % (exc,))
_chain()
