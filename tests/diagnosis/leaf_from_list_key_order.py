"""`Dataset.from_list` of rows whose keys come from a set: the same columns in another order."""

from datasets import Dataset

KEYS = list({"alpha", "beta", "gamma", "delta", "epsilon"})
rows = [{key: i for key in KEYS} for i in range(4)]
print(Dataset.from_list(rows)._fingerprint)
