"""Control: membership in a tuple literal instead of a set literal."""

from datasets import Dataset

ds = Dataset.from_dict({"text": ["good", "bad", "meh"], "label": ["pos", "neg", "neu"]})
ds = ds.filter(lambda ex: ex["label"] in ("pos", "neg", "mixed", "unknown", "other"))
print(ds._fingerprint)
