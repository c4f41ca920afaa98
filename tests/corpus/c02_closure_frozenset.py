"""Stop-word removal with a frozenset captured in a closure."""

from datasets import Dataset

STOPWORDS = ["a", "an", "the", "of", "to", "in", "on", "and", "or", "is", "it", "at"]


def make_cleaner():
    stop = frozenset(STOPWORDS)

    def clean(example):
        return {"text": " ".join(w for w in example["text"].split() if w not in stop)}

    return clean


ds = Dataset.from_dict({"text": ["the cat is on the mat", "a dog and a cat", "it rains in spain"]})
ds = ds.map(make_cleaner())
print(ds._fingerprint)
