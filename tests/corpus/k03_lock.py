"""Control: a mapper holding a threading.Lock (dill pickles locks)."""

import threading

from datasets import Dataset


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.prefix = "row"

    def __call__(self, example, idx):
        with self.lock:
            return {"name": f"{self.prefix}-{idx}"}


ds = Dataset.from_dict({"text": ["a", "b", "c"]})
ds = ds.map(Counter(), with_indices=True)
print(ds._fingerprint)
