"""Control for s03: the shard names sorted before the loop."""

from corpus_data import csv_file
from datasets import concatenate_datasets, load_dataset

parts = []
for name in sorted({"alpha", "beta", "gamma", "delta", "epsilon"}):
    parts.append(load_dataset("csv", data_files=csv_file(f"k18-{name}", rows=3), split="train"))
ds = concatenate_datasets(parts)
ds = ds.map(lambda ex: {"n": len(ex["text"])})
print(ds._fingerprint)
