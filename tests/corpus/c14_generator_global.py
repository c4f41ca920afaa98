"""Assign ids from a module-level generator (generators cannot be pickled)."""

import itertools

from datasets import Dataset

ids = (f"doc-{i}" for i in itertools.count())


def assign(example):
    return {"doc_id": next(ids)}


ds = Dataset.from_dict({"text": ["a", "b", "c"]})
ds = ds.map(assign)
print(ds._fingerprint)
