"""A tokenizer-like callable whose `__getstate__` returns a pair (its vocabulary dict, its stop words
as a tuple built from a frozenset): the culprit is the tuple, the second item of that state."""

from corpus_data import splits

WORDS = ["the", "a", "in", "on", "and", "cat", "dog", "bird", "sat", "mat"]


class Tok:
    def __init__(self):
        self.vocab = {w: i for i, w in enumerate(WORDS)}
        self.stop = frozenset(WORDS[:8])

    def __getstate__(self):
        return (self.vocab, tuple(self.stop))

    def __setstate__(self, state):
        self.vocab, stop = state
        self.stop = frozenset(stop)

    def __call__(self, ex):
        return {"ids": [self.vocab.get(w, 0) for w in ex["text"].split() if w not in self.stop]}


print(splits("leaf2")["train"].map(Tok())._fingerprint)
