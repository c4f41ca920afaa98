"""Control for c22 and c27: the stop words a module-level tuple (no set literal in any code)."""

from corpus_data import splits

STOP = ("a", "and", "in", "on", "the")


class Options:
    def __init__(self):
        self.stop = STOP


class Config:
    def __init__(self):
        self.options = Options()
        self.lower = True


class Clean:
    def __init__(self, config):
        self.config = config

    def __call__(self, ex):
        return {"text": " ".join(w for w in ex["text"].split() if w not in self.config.options.stop)}


ds = splits("k22")["train"]
print(ds.map(Clean(Config()))._fingerprint)
