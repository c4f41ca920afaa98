"""Filter, seeded split, then only the test split's map joins a set (the train split's step is
deterministic: comparing steps by position would blame it on a warm run)."""

import corpus_data
from datasets import load_dataset

MARKERS = ", ".join({"alpha", "beta", "gamma", "delta", "epsilon"})
ds = load_dataset("json", data_files=corpus_data.data_files("u11"), split="train")
ds = ds.filter(lambda ex: len(ex["text"]) > 3)
parts = ds.train_test_split(test_size=0.5, seed=0)
train = parts["train"].map(lambda ex: {"n": len(ex["text"])})
test = parts["test"].map(lambda ex, m: {"m": m}, fn_kwargs={"m": MARKERS})
print(train._fingerprint, test._fingerprint)
