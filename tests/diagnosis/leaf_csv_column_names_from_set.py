"""A csv read with `column_names=list({...})`: a config kwarg of the builder, built from a set."""

from corpus_data import csv_file
from datasets import load_dataset

ds = load_dataset(
    "csv", data_files=csv_file("leaf6"), split="train", column_names=list({"text", "label"}), skiprows=1
)
print(ds.map(lambda ex: {"n": len(ex["text"])})._fingerprint)
