"""`data_files` built from a set of paths: `load_dataset` hashes the list in the order given, so the
source's config id (and every fingerprint after it) follows PYTHONHASHSEED. Reported as "cache
not reused when data_files is a list built from glob/set" (huggingface/datasets#6108 shape)."""

from corpus_data import csv_file
from datasets import load_dataset

paths = [csv_file(f"s01-part-{c}") for c in {"a", "b", "c", "d", "e"}]  # the set's order
ds = load_dataset("csv", data_files=paths, split="train")
ds = ds.map(lambda ex: {"n": len(ex["text"])})
print(ds._fingerprint)
