"""A DataLoader with worker processes beside a named thread of the user's own, for
`probing <pid> backtrace` (thread names).

The loader's two workers make the main process start multiprocessing queue feeder threads
(threading names them QueueFeederThread); the script also starts `metrics-uploader`, a daemon
thread that waits on an Event. After iterating the loader once it prints READY and sleeps until
the test kills it (at most 300 s). Stdlib and torch only.
"""
import threading
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def upload(stop):
    stop.wait()  # frame: uploader


def main():
    stop = threading.Event()
    threading.Thread(target=upload, args=(stop,), name="metrics-uploader", daemon=True).start()
    data = TensorDataset(torch.arange(64, dtype=torch.float32).reshape(32, 2))
    loader = DataLoader(data, batch_size=4, num_workers=2, persistent_workers=True)
    total = sum(float(batch[0].sum()) for batch in loader)
    print("READY", total, flush=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(0.2)  # frame: main


if __name__ == "__main__":
    main()
