# How long does building one batch take? Times the Dataset and collate_fn of each DataLoader in this thread (no workers started, the training iterator untouched).
def _probing_example():
    import time
    from torch.utils.data import DataLoader, IterableDataset
    loaders = [(name, value) for name, value in globals().items() if isinstance(value, DataLoader)]
    if not loaders:
        print("no DataLoader among the script's globals")
    for name, loader in loaders:
        if isinstance(loader.dataset, IterableDataset) or not loader.batch_size:
            print(f"{name}: an iterable dataset or no fixed batch size; time it from "
                  "python.dataloader_trace instead (examples/queries/data-loader-wait.sql)")
            continue
        count = min(loader.batch_size, len(loader.dataset))
        start = time.perf_counter()
        loader.collate_fn([loader.dataset[i] for i in range(count)])
        elapsed = time.perf_counter() - start
        print(f"{name}: one batch of {count} samples built in {elapsed * 1000:.2f} ms "
              f"(one thread; the loader uses {loader.num_workers} worker processes)")


try:
    _probing_example()
finally:
    del _probing_example
