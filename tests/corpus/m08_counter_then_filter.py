"""Word frequencies counted into a global Counter by a map, then used by a filter.

datasets issue #3638 (objects changed by a map): on a run that loads the map from the cache the
Counter stays empty, so the filter's fingerprint (and its result) differs from a cold run.
"""

from collections import Counter

from corpus_data import splits

FREQ = Counter()


def count(example):
    FREQ.update(example["text"].split())
    return {"n_words": len(example["text"].split())}


ds = splits("m08")["train"]
ds = ds.map(count)
ds = ds.filter(lambda ex: all(FREQ[w] > 1 for w in ex["text"].split()[:1]))
print(ds._fingerprint)
