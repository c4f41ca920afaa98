"""A dataset built with `Dataset.from_pandas` from a frame with a run-time column.

datasets issue #2496 (the fingerprint of a source follows its content): an in-memory source is
hashed from its table, so a column filled at run time gives a new source on every run.
"""

import time

import pandas as pd
from datasets import Dataset

frame = pd.DataFrame({"text": ["a b", "c d", "e f"], "loaded_at": [time.time()] * 3})
ds = Dataset.from_pandas(frame)
ds = ds.map(lambda ex: {"n": len(ex["text"])})
print(ds._fingerprint)
