"""train_test_split(seed=None) then a tokenizing map of the train split (cf. TRL/transformers
examples splitting an eval set without a seed)."""

from datasets import Dataset

ds = Dataset.from_dict({"x": list(range(20))})
parts = ds.train_test_split(test_size=0.25, seed=None)
train = parts["train"].map(lambda ex: {"y": ex["x"] + 1})
print(train._fingerprint)
