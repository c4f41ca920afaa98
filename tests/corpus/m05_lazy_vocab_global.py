"""A module-level vocabulary built on the first call of the mapped function.

The lazy-initialisation pattern behind datasets issue #3638 without any tokenizer library: the
global is None when the train split is hashed and a dict when the test split is.
"""

from corpus_data import splits

VOCAB = None


def encode(example):
    global VOCAB
    if VOCAB is None:
        VOCAB = {w: i for i, w in enumerate(sorted(["the", "a", "cat", "dog", "sat", "on", "mat", "park"]))}
    return {"ids": [VOCAB.get(w, -1) for w in example["text"].split()]}


dd = splits("m05")
dd = dd.map(encode)
print(dd["test"]._fingerprint)
