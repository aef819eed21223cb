# How much memory do the attention score matrices take? batch x heads x sequence² x element size, from model.config (Hugging Face style).
def _probing_example():
    model = globals().get("model")
    config = getattr(model, "config", None)
    if not all(hasattr(config, k) for k in ("max_position_embeddings", "num_attention_heads")):
        print("model.config has no max_position_embeddings and num_attention_heads: "
              "nothing to estimate")
        return
    seq = config.max_position_embeddings
    heads = config.num_attention_heads
    layers = getattr(config, "num_hidden_layers", 1)
    batch = globals().get("batch_size", 1)
    element = next(model.parameters()).element_size()
    per_layer = batch * heads * seq * seq * element
    print(f"attention scores: batch {batch} x {heads} heads x {seq}x{seq} x {element} bytes = "
          f"{per_layer / 2**20:.3f} MiB per layer, {layers * per_layer / 2**20:.3f} MiB "
          f"for {layers} layers")


try:
    _probing_example()
finally:
    del _probing_example
