"""Control of u15: the column list is sorted."""

import functools

from datasets import Dataset

COLS = sorted({"title", "body", "summary", "tags"})


def join(example, cols):
    return {"all": " ".join(str(example[c]) for c in cols)}


ds = Dataset.from_dict({"title": ["t"], "body": ["b"], "summary": ["s"], "tags": ["x"]})
ds = ds.map(functools.partial(join, cols=COLS))
print(ds._fingerprint)
