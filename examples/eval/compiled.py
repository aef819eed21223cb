# Is the model compiled with torch.compile? (Reads only; compiling a running model is the script's business.)
def _probing_example():
    import torch
    model = globals().get("model")
    if not isinstance(model, torch.nn.Module):
        print("no nn.Module named model among the script's globals")
        return
    original = getattr(model, "_orig_mod", None)
    if isinstance(original, torch.nn.Module):
        print(f"model: {type(original).__name__}, compiled with torch.compile ({type(model).__name__})")
    else:
        print(f"model: {type(model).__name__}, not compiled with torch.compile")


try:
    _probing_example()
finally:
    del _probing_example
