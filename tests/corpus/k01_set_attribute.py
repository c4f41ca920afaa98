"""Control: a runtime `set` on self is sorted by datasets' pickler, so it is stable."""

from datasets import Dataset


class KeywordTagger:
    def __init__(self, keywords):
        self.keywords = set(keywords)

    def __call__(self, example):
        return {"has_kw": any(w in self.keywords for w in example["text"].split())}


ds = Dataset.from_dict({"text": ["buy now", "hello there", "free offer"]})
ds = ds.map(KeywordTagger(["buy", "free", "offer", "win", "cash"]))
print(ds._fingerprint)
