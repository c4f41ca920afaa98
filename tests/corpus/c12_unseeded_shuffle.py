"""shuffle() without a seed: datasets draws a generator from numpy's global state."""

from datasets import Dataset

ds = Dataset.from_dict({"x": list(range(20))})
ds = ds.shuffle()
ds = ds.map(lambda ex: {"y": ex["x"] * 2})
print(ds._fingerprint)
