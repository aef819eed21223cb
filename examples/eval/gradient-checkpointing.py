# Which modules use activation (gradient) checkpointing? Modules with a gradient_checkpointing attribute, as Hugging Face models have.
def _probing_example():
    import torch
    model = globals().get("model")
    if not isinstance(model, torch.nn.Module):
        print("no nn.Module named model among the script's globals")
        return
    found = [(name or type(model).__name__, module.gradient_checkpointing)
             for name, module in model.named_modules() if hasattr(module, "gradient_checkpointing")]
    if not found:
        print("no module of model has a gradient_checkpointing attribute")
    for name, on in found:
        print(f"{name}: gradient_checkpointing={on}")


try:
    _probing_example()
finally:
    del _probing_example
