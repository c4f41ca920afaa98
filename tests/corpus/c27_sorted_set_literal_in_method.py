"""`tuple(sorted({...}))` inside a method of a class the script defines: the result is sorted, but
the class is pickled by value and its method's code holds the set literal as a frozenset constant,
pickled in PYTHONHASHSEED order. The culprit is that constant, not "the function's code"."""

from corpus_data import splits


class Options:
    def __init__(self):
        self.stop = tuple(sorted({"the", "a", "in", "on", "and"}))


class Config:
    def __init__(self):
        self.options = Options()
        self.lower = True


class Clean:
    def __init__(self, config):
        self.config = config

    def __call__(self, ex):
        return {"text": " ".join(w for w in ex["text"].split() if w not in self.config.options.stop)}


ds = splits("c27")["train"]
print(ds.map(Clean(Config()))._fingerprint)
