"""A processing timestamp captured in a closure."""

import time

from datasets import Dataset


def stamper():
    started = time.time()

    def stamp(example):
        return {"processed_at": started}

    return stamp


ds = Dataset.from_dict({"text": ["a", "b", "c"]})
ds = ds.map(stamper())
print(ds._fingerprint)
