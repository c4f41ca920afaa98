"""DatasetDict.map with a function that closes over a frozenset: one cause (the call), not one per
split, and the test split's step never compared with the train split's."""

from corpus_data import splits

stop = frozenset({"the", "a", "in", "on", "and"})


def clean(ex):
    return {"text": " ".join(w for w in ex["text"].split() if w not in stop)}


dd = splits("c25").filter(lambda ex: len(ex["text"]) > 3)
print(dd.map(clean)["train"]._fingerprint)
