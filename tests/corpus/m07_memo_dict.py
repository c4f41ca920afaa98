"""A memo dict filled by the mapped function (a hand-made cache of normalised words).

datasets issue #3847 (cache not re-used across runs): the memo is part of what datasets hashes,
empty on a run that loaded the first split from the cache, full on a run that computed it.
"""

from corpus_data import splits

MEMO = {}


def normalize(example):
    out = []
    for w in example["text"].split():
        if w not in MEMO:
            MEMO[w] = w.lower().rstrip("s")
        out.append(MEMO[w])
    return {"norm": " ".join(out)}


dd = splits("m07")
dd = dd.map(normalize)
print(dd["test"]._fingerprint)
