# Is the model compiled with torch.compile? (Reads only; compiling a running model is the script's business.)
def _probing_example():
    import sys
    import types
    import torch

    # The script's models wherever it keeps them: its module-level names (net, model, ...) and
    # one level down in its other objects (trainer.model), each model once.
    roots, seen = [], set()

    def add(name, value):
        if isinstance(value, torch.nn.Module) and id(value) not in seen:
            seen.add(id(value))
            roots.append((name, value))

    scope = [(k, v) for k, v in vars(sys.modules["__main__"]).items() if not k.startswith("__")]
    for name, value in scope:
        add(name, value)
    for name, value in scope:
        if isinstance(value, (torch.nn.Module, type, types.ModuleType, types.FunctionType)):
            continue
        for attr, inner in list(getattr(value, "__dict__", {}).items()):
            add(f"{name}.{attr}", inner)
    # a module inside another one (a loop variable left over from `for m in model.modules()`)
    # is that model's part, not a model
    inside = {id(sub) for _, m in roots for sub in m.modules() if sub is not m}
    roots = [(name, m) for name, m in roots if id(m) not in inside]

    def compiled(m):
        """How m itself is compiled, or None."""
        if isinstance(getattr(m, "_orig_mod", None), torch.nn.Module):
            return f"compiled with torch.compile ({type(m).__name__})"
        if getattr(m, "_compiled_call_impl", None) is not None:
            return "compiled in place with Module.compile()"
        return None

    # the model under a compiled wrapper is that model, compiled: not a second, plain one
    wrapped = {id(m._orig_mod) for _, m in roots if isinstance(getattr(m, "_orig_mod", None),
                                                              torch.nn.Module)}
    found, plain = [], []
    for name, m in roots:
        if id(m) in wrapped:
            continue
        how = compiled(m)
        inner = m._orig_mod if how and hasattr(m, "_orig_mod") else m
        parts = [sub for sub, child in inner.named_modules() if sub and compiled(child)]
        if how:
            found.append(f"{name}: {type(inner).__name__}, {how}")
        elif parts:
            found.append(f"{name}: {type(m).__name__}, not compiled itself; compiled submodules: "
                         f"{', '.join(parts)}")
        elif next(m.parameters(), None) is not None:  # a loss module is no model
            plain.append(f"{name}: {type(m).__name__}, not compiled with torch.compile")
    if not found and not plain:
        print("no nn.Module with parameters among the script's globals (or one level down)")
    for line in found + plain:
        print(line)


try:
    _probing_example()
finally:
    del _probing_example
