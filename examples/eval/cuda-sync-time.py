# How far ahead of the GPU is the host? Time for torch.cuda.synchronize() to return (the queued work of the current device).
def _probing_example():
    import time
    import torch
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        print("this process does not use CUDA: no device work to wait for")
        return
    start = time.perf_counter()
    torch.cuda.synchronize()
    print(f"torch.cuda.synchronize() returned after {(time.perf_counter() - start) * 1000:.2f} ms "
          f"on cuda:{torch.cuda.current_device()}")


try:
    _probing_example()
finally:
    del _probing_example
