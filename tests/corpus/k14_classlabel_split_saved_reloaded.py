"""Control: csv -> cast_column(ClassLabel) -> train_test_split(seed=) -> save_to_disk ->
load_from_disk -> map -> filter. Every step is deterministic; a warm run loads each one from the
cache and records fewer of datasets' internal calls than a run that computes them."""

import os

from corpus_data import csv_file
from datasets import ClassLabel, config, load_dataset, load_from_disk

ds = load_dataset("csv", data_files=csv_file("k14"), split="train")
ds = ds.cast_column("label", ClassLabel(names=["neg", "pos"]))
dd = ds.train_test_split(test_size=0.25, seed=0)
saved = os.path.join(os.path.dirname(str(config.HF_DATASETS_CACHE)), "k14-saved")
dd.save_to_disk(saved)
dd = load_from_disk(saved)
dd = dd.map(lambda ex: {"n": len(ex["text"])})
dd = dd.filter(lambda ex: ex["n"] > 19)
print({split: d._fingerprint for split, d in dd.items()})
