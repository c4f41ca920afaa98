"""Control: `select(list(set_of_ints))`, `sort`, `shuffle(seed=42)`, `with_transform` (small ints
iterate in the same order under every hash seed; with_transform is never cached)."""

from datasets import Dataset

ds = Dataset.from_dict({"x": list(range(30))})
ds = ds.select(sorted(set(range(0, 30, 3))))
ds = ds.select(list({1, 2, 3, 7, 5}))
ds = ds.sort("x", reverse=True)
ds = ds.shuffle(seed=42)
ds = ds.with_transform(lambda batch: {"x2": [v * 2 for v in batch["x"]]})
print(ds._fingerprint)
