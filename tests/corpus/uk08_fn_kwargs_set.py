"""Control of u08: the stop words are passed as the set itself (datasets pickles a set's elements
sorted)."""

from datasets import Dataset

STOP = {"the", "a", "an", "of", "in", "on", "and"}


def strip(example, stop):
    return {"kept": [w for w in example["text"].split() if w not in stop]}


ds = Dataset.from_dict({"text": ["the cat on a mat", "an owl in the tree"]})
ds = ds.map(strip, fn_kwargs={"stop": STOP})
print(ds._fingerprint)
