"""Control: filter then train_test_split(seed=0), then a map per split (a warm run loads the filter
and the split from the cache)."""

import corpus_data
from datasets import load_dataset

ds = load_dataset("json", data_files=corpus_data.data_files("uk10"), split="train")
ds = ds.filter(lambda ex: len(ex["text"]) > 3)
parts = ds.train_test_split(test_size=0.5, seed=0)
train = parts["train"].map(lambda ex: {"n": len(ex["text"])})
test = parts["test"].map(lambda ex: {"n": len(ex["text"]) + 1})
print(train._fingerprint, test._fingerprint)
