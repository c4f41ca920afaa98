"""Control: a frozenset of ints (int hashes are not salted by PYTHONHASHSEED)."""

from datasets import Dataset

KEEP_IDS = frozenset([3, 17, 42, 7, 99, 1000])


def keep(example):
    return example["id"] in KEEP_IDS


ds = Dataset.from_dict({"id": [1, 3, 7, 42, 5]})
ds = ds.filter(keep)
print(ds._fingerprint)
