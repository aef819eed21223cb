# Is the script set up for mixed precision? Its GradScalers and the dtypes of the model's parameters (autocast is per thread: see examples/queries/amp-status.sql).
def _probing_example():
    import collections
    import torch
    scalers = [(name, value) for name, value in globals().items()
               if isinstance(value, torch.amp.GradScaler)]
    for name, scaler in scalers:
        enabled = scaler.is_enabled()
        print(f"{name}: GradScaler enabled={enabled}" +
              (f" scale={scaler.get_scale():g}" if enabled else ""))
    if not scalers:
        print("no GradScaler among the script's globals")
    model = globals().get("model")
    if isinstance(model, torch.nn.Module):
        dtypes = collections.Counter(str(p.dtype).replace("torch.", "") for p in model.parameters())
        print("model parameters: " + ", ".join(f"{n} {d}" for d, n in sorted(dtypes.items())))


try:
    _probing_example()
finally:
    del _probing_example
