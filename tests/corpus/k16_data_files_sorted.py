"""Control for s01: the same files, `sorted(...)`: one order in every run."""

from corpus_data import csv_file
from datasets import load_dataset

paths = sorted({csv_file(f"k16-part-{c}") for c in "abcde"})
ds = load_dataset("csv", data_files=paths, split="train")
ds = ds.map(lambda ex: {"n": len(ex["text"])})
print(ds._fingerprint)
