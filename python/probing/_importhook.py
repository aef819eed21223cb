"""Run a callback once a module has been fully imported (now, if it already has been).

The agent must hook torch whether torch is imported before or after probing starts. A finder on
sys.meta_path sees the import of `name`, lets the normal finders locate it, and wraps the
loader so the callback runs right after the module body finished executing. Every other import
costs one string comparison.
"""
import sys

_pending = {}


class _Finder:
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module, _original=original, _name=fullname):
            _original(module)
            for callback in _pending.pop(_name, []):
                _run(callback)

        # Wrap on a per-spec proxy so the shared loader object is left untouched.
        spec.loader = _LoaderProxy(loader, exec_module)
        return spec


class _LoaderProxy:
    def __init__(self, loader, exec_module):
        self._loader = loader
        self.exec_module = exec_module

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _run(callback):
    try:
        callback()
    except Exception as exc:  # never break the user's import
        sys.stderr.write(f"probing: {exc}\n")


_finder = _Finder()


def when_imported(name, callback):
    """Calls callback() once `name` is imported; immediately if it already is."""
    if name in sys.modules and getattr(sys.modules[name], "__spec__", None) is not None:
        mod = sys.modules[name]
        initializing = getattr(mod.__spec__, "_initializing", False)
        if not initializing:
            _run(callback)
            return
    _pending.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def remove():
    """Forgets every pending callback and takes the finder out of sys.meta_path (detach)."""
    _pending.clear()
    while _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
