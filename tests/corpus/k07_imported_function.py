"""Control: a module-level function from a helper module is pickled by reference."""

from datasets import Dataset
from k07_helpers import normalize

ds = Dataset.from_dict({"text": ["The Cat", "A Dog", "an owl"]})
ds = ds.map(normalize)
print(ds._fingerprint)
