"""A closure over a frozenset in a map of the test split only, after a filter and a seeded
train_test_split that a warm run loads from the cache (recording fewer internal calls than the
cold run that computes them): the cause is that map, and the train split is never compared with
the test split."""

from corpus_data import splits

STOP = ["a", "an", "the", "of", "to", "in", "on", "and", "or", "is", "it", "at"]


def make_cleaner():
    stop = frozenset(STOP)

    def clean(example):
        return {"text": " ".join(w for w in example["text"].split() if w not in stop)}

    return clean


ds = splits("c19")["train"]
ds = ds.filter(lambda ex: len(ex["text"]) > 3)
dd = ds.train_test_split(test_size=0.5, seed=0)
train = dd["train"].map(lambda ex: {"n": len(ex["text"])})
test = dd["test"].map(make_cleaner())
test = test.filter(lambda ex: len(ex["text"]) > 0)
print(train._fingerprint, test._fingerprint)
