"""Keep rows whose label is in a set literal: `{...}` compiles to a frozenset constant."""

from datasets import Dataset

ds = Dataset.from_dict(
    {"text": ["good", "bad", "meh", "great", "awful"], "label": ["pos", "neg", "neu", "pos", "neg"]}
)
ds = ds.filter(lambda ex: ex["label"] in {"pos", "neg", "mixed", "unknown", "other"})
print(ds._fingerprint)
