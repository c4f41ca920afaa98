"""Synonym groups as frozensets in a numpy array of objects, captured in a closure: each frozenset
is named by its index in the array (the array itself is no fix)."""

import numpy as np
from corpus_data import splits

GROUPS = [["cat", "cats", "kitten", "kitty"], ["dog", "dogs", "puppy", "hound"], ["bird", "birds", "sparrow"]]


def make(groups):
    table = np.empty(len(groups), dtype=object)
    for i, group in enumerate(groups):
        table[i] = frozenset(group)

    def synonyms(ex):
        return {"n": sum(1 for w in ex["text"].split() for g in table if w in g)}

    return synonyms


print(splits("leaf4")["train"].map(make(GROUPS))._fingerprint)
