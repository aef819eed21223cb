# How many samples per second go through the model right now? Counts the model's forwards for 2 seconds with a forward hook, removed afterwards.
def _probing_example():
    import time
    import torch
    model = globals().get("model")
    if not isinstance(model, torch.nn.Module):
        print("no nn.Module named model among the script's globals")
        return
    seen = {"forwards": 0, "samples": 0}

    def count(module, args, output):
        seen["forwards"] += 1
        first = args[0] if args else None
        seen["samples"] += first.shape[0] if isinstance(first, torch.Tensor) and first.dim() else 1

    handle = model.register_forward_hook(count)
    try:
        start = time.perf_counter()
        time.sleep(2.0)
        elapsed = time.perf_counter() - start
    finally:
        handle.remove()
    if not seen["forwards"]:
        print("the model ran no forward in 2 s: it is not training or serving now")
        return
    print(f"throughput: {seen['samples'] / elapsed:.1f} samples/s "
          f"({seen['forwards']} forwards in {elapsed:.1f} s)")


try:
    _probing_example()
finally:
    del _probing_example
