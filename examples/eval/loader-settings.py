# How is each DataLoader of the script set up: workers, pinned memory, prefetching, batch size?
def _probing_example():
    from torch.utils.data import DataLoader
    loaders = [(name, value) for name, value in globals().items() if isinstance(value, DataLoader)]
    if not loaders:
        print("no DataLoader among the script's globals")
    for name, loader in loaders:
        print(f"{name}: num_workers={loader.num_workers} pin_memory={loader.pin_memory} "
              f"prefetch_factor={loader.prefetch_factor} persistent_workers={loader.persistent_workers} "
              f"batch_size={loader.batch_size}")


try:
    _probing_example()
finally:
    del _probing_example
