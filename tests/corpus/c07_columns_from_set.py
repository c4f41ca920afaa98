"""remove_columns computed from a set difference: its list order follows the hash seed."""

from datasets import Dataset

ds = Dataset.from_dict(
    {"text": ["x", "y"], "meta_a": [1, 2], "meta_b": [3, 4], "meta_c": [5, 6], "meta_d": [7, 8], "id": [0, 1]}
)
drop = list(set(ds.column_names) - {"text", "id"})
ds = ds.map(lambda ex: {"n": len(ex["text"])}, remove_columns=drop)
print(ds._fingerprint)
