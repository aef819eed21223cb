"""A lightweight rank of a job, without torch: starts probing (run it under `probing run`),
joins the job through a store of files (probing._agent._register_job: the same registry code
as a torch.distributed rank, with a store that needs no torch), prints READY and waits.

    probing run -- python job_agent.py STORE_DIR RANK WORLD

Used by tests/integration/test_cluster.py and bench/fanout.py.
"""
import os
import sys
import time

import probing


class DirStore:
    """The c10d Store methods the registry uses (set, get, check, delete_key) over a directory."""

    def __init__(self, d):
        self.d = d

    def _p(self, key):
        return os.path.join(self.d, key.replace("/", "%"))

    def set(self, key, value):
        tmp = f"{self._p(key)}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(value)
        os.replace(tmp, self._p(key))

    def get(self, key):
        with open(self._p(key), "rb") as f:
            return f.read()

    def check(self, keys):
        return all(os.path.exists(self._p(k)) for k in keys)

    def delete_key(self, key):
        try:
            os.unlink(self._p(key))
            return True
        except OSError:
            return False


def main():
    store, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    probing._agent._register_job(DirStore(store), rank, world)
    print("READY", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
