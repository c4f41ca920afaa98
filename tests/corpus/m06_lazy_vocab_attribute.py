"""A hand-written tokenizer whose `.vocab` is built lazily by the first encode call.

datasets issue #3638: the state of an object the function closes over changes when the map runs,
so whether a later step's fingerprint matches depends on whether the earlier step was cached.
"""

from corpus_data import TEXTS, splits


class SimpleTokenizer:
    def __init__(self, texts):
        self.texts = texts
        self.vocab = None

    def encode(self, text):
        if self.vocab is None:
            words = sorted({w for t in self.texts for w in t.split()})
            self.vocab = {w: i for i, w in enumerate(words)}
        return [self.vocab.get(w, -1) for w in text.split()]


tokenizer = SimpleTokenizer(TEXTS["train"])


def encode(example):
    return {"ids": tokenizer.encode(example["text"])}


dd = splits("m06")
dd = dd.map(encode)
print(dd["test"]._fingerprint)
