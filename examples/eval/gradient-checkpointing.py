# Which modules use activation (gradient) checkpointing? A gradient_checkpointing attribute (Hugging Face), torch.utils.checkpoint in a forward, FSDP's CheckpointWrapper or checkpoint() of torch.distributed.
def _probing_example():
    import inspect
    import re
    import sys
    import types
    import torch

    # The script's models wherever it keeps them: its module-level names and one level down in
    # its other objects (trainer.model), each model once.
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
    if not roots:
        print("no nn.Module among the script's globals (or one level down)")
        return

    try:  # the registry of torch.distributed's composable APIs (checkpoint(module))
        from torch.distributed._composable.contract import _get_registry
    except Exception:
        _get_registry = None
    calls = re.compile(r"\b(checkpoint|checkpoint_sequential)\s*\(")
    sources = {}

    def forward_calls_checkpoint(cls):
        """file:line of cls.forward when its source calls torch.utils.checkpoint, else None."""
        if cls not in sources:
            sources[cls] = None
            fn = getattr(cls, "forward", None)
            if fn is not None and getattr(fn, "__module__", "").split(".")[0] != "torch":
                try:
                    lines, first = inspect.getsourcelines(fn)
                    text = "".join(lines)
                    if calls.search(text) and "checkpoint" in text:
                        sources[cls] = f"{inspect.getsourcefile(fn)}:{first}"
                except (OSError, TypeError):
                    pass
        return sources[cls]

    found, done = [], set()
    for root, model in roots:
        for sub, m in model.named_modules():
            if id(m) in done:
                continue
            done.add(id(m))
            name = f"{root}.{sub}" if sub else root
            if hasattr(m, "gradient_checkpointing"):
                found.append(f"{name}: gradient_checkpointing={m.gradient_checkpointing}")
            elif type(m).__name__ == "CheckpointWrapper":
                found.append(f"{name}: wrapped in CheckpointWrapper (apply_activation_checkpointing)")
            elif _get_registry and "checkpoint" in (_get_registry(m) or {}):
                found.append(f"{name}: torch.distributed checkpoint() applied")
            else:
                where = forward_calls_checkpoint(type(m))
                if where:
                    found.append(f"{name}: its forward calls torch.utils.checkpoint "
                                 f"({type(m).__name__}.forward, {where})")
    if not found:
        print("no module uses activation checkpointing (no gradient_checkpointing attribute, no "
              "torch.utils.checkpoint in a forward, no CheckpointWrapper)")
    for line in found:
        print(line)


try:
    _probing_example()
finally:
    del _probing_example
