"""A loop over a set of shard names feeds `concatenate_datasets`: each source is the same in every
run, but the concatenation's fingerprint hashes its inputs in order, and the order is the set's."""

from corpus_data import csv_file
from datasets import concatenate_datasets, load_dataset

parts = []
for name in {"alpha", "beta", "gamma", "delta", "epsilon"}:
    parts.append(load_dataset("csv", data_files=csv_file(f"s03-{name}", rows=3), split="train"))
ds = concatenate_datasets(parts)
ds = ds.map(lambda ex: {"n": len(ex["text"])})
print(ds._fingerprint)
