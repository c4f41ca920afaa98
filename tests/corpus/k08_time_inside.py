"""Control: the timestamp is taken inside the function, not captured from outside."""

import time

from datasets import Dataset


def stamp(example):
    return {"processed_at": time.time()}


ds = Dataset.from_dict({"text": ["a", "b", "c"]})
ds = ds.map(stamp, load_from_cache_file=False)
print(ds._fingerprint)
