"""Control for c25 (and alignment: a cached filter on each split, then a map): deterministic."""

from corpus_data import splits

stop = ("a", "and", "in", "on", "the")


def clean(ex):
    return {"text": " ".join(w for w in ex["text"].split() if w not in stop)}


dd = splits("k25").filter(lambda ex: len(ex["text"]) > 3)
print(dd.map(clean)["train"]._fingerprint)
