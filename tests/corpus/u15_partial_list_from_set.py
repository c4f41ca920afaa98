"""functools.partial binding a column list built from a set (cf. huggingface/datasets#8168:
partial arguments are hashed by value, order included)."""

import functools

from datasets import Dataset

COLS = list({"title", "body", "summary", "tags"})


def join(example, cols):
    return {"all": " ".join(str(example[c]) for c in cols)}


ds = Dataset.from_dict({"title": ["t"], "body": ["b"], "summary": ["s"], "tags": ["x"]})
ds = ds.map(functools.partial(join, cols=COLS))
print(ds._fingerprint)
