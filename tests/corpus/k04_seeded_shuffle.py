"""Control: shuffle and train_test_split with explicit seeds."""

from datasets import Dataset

ds = Dataset.from_dict({"x": list(range(20))})
ds = ds.shuffle(seed=42)
splits = ds.train_test_split(test_size=0.25, seed=0)
train = splits["train"].map(lambda ex: {"y": ex["x"] + 1})
print(train._fingerprint, splits["test"]._fingerprint)
