"""An augmentation seed taken from the clock and passed in fn_kwargs."""

import random
import time

from datasets import Dataset


def augment(example, seed):
    rng = random.Random(seed + len(example["text"]))
    return {"text": example["text"] + "!" * rng.randint(0, 2)}


ds = Dataset.from_dict({"text": ["a", "bb", "ccc"]})
# Nanoseconds: two runs started at once (--isolated) may well read the same millisecond.
ds = ds.map(augment, fn_kwargs={"seed": time.time_ns() % 1_000_000_000})
print(ds._fingerprint)
