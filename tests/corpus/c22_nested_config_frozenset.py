"""A preprocessing config object holding another whose stop words are a frozenset: the culprit
is two attributes down, at the frozenset."""

from corpus_data import splits


class Options:
    def __init__(self):
        self.stop = frozenset({"the", "a", "in", "on", "and"})


class Config:
    def __init__(self):
        self.options = Options()
        self.lower = True


class Clean:
    def __init__(self, config):
        self.config = config

    def __call__(self, ex):
        return {"text": " ".join(w for w in ex["text"].split() if w not in self.config.options.stop)}


ds = splits("c22")["train"]
print(ds.map(Clean(Config()))._fingerprint)
