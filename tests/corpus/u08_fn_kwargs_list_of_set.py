"""Stop words passed through fn_kwargs as `list(set(...))` (cf. huggingface/datasets#8168: fn_kwargs
are hashed by value, so their order matters)."""

from datasets import Dataset

STOP = list({"the", "a", "an", "of", "in", "on", "and"})


def strip(example, stop):
    return {"kept": [w for w in example["text"].split() if w not in stop]}


ds = Dataset.from_dict({"text": ["the cat on a mat", "an owl in the tree"]})
ds = ds.map(strip, fn_kwargs={"stop": STOP})
print(ds._fingerprint)
