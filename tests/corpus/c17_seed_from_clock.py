"""An augmentation seed taken from the clock and passed in fn_kwargs."""

import random
import time

from datasets import Dataset


def augment(example, seed):
    rng = random.Random(seed + len(example["text"]))
    return {"text": example["text"] + "!" * rng.randint(0, 2)}


ds = Dataset.from_dict({"text": ["a", "bb", "ccc"]})
ds = ds.map(augment, fn_kwargs={"seed": int(time.time() * 1000) % 10_000})
print(ds._fingerprint)
