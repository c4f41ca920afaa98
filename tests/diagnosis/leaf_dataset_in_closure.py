"""A lookup dataset built from a list made from a set (one cause), held by a later map's function
(a second): that culprit is a dataset, hashed with its contents, not a value of hash()."""

from corpus_data import splits
from datasets import Dataset

lookup = Dataset.from_dict({"word": list({"cat", "dog", "bird", "mat", "park", "song"})})


def known(ex):
    words = set(lookup["word"])
    return {"known": sum(w in words for w in ex["text"].split())}


print(splits("leaf8")["train"].map(known)._fingerprint)
