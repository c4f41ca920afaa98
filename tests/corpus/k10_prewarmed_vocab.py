"""Control for m06: the lazy vocabulary is built (warmed) before the first map, so the map does
not change the tokenizer (datasets issue #3638's workaround: encode once before mapping)."""

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
tokenizer.encode("warm up")


def encode(example):
    return {"ids": tokenizer.encode(example["text"])}


dd = splits("k10")
dd = dd.map(encode)
print(dd["test"]._fingerprint)
