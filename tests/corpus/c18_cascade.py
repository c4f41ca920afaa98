"""A set literal in the first step of a longer pipeline: every later fingerprint differs too."""

from datasets import Dataset

ds = Dataset.from_dict({"text": ["Good movie", "Bad plot", "OK", "Great cast", "Dull"], "y": [1, 0, 1, 1, 0]})
ds = ds.map(
    lambda ex: {"text": ex["text"].lower(), "short": ex["text"] in {"OK", "Dull", "Meh", "Fine", "Bad"}}
)
ds = ds.filter(lambda ex: len(ex["text"]) > 1)
ds = ds.map(lambda ex: {"n": len(ex["text"])})
ds = ds.rename_column("y", "label")
ds = ds.select([0, 1, 2])
print(ds._fingerprint)
