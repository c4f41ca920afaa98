"""Control for l03: a seeded numpy Generator in `fn_kwargs` (its state advances during the map, but
nothing hashes it afterwards), then a seeded shuffle (datasets issue #3847's fix for randomness)."""

import numpy as np
from corpus_data import splits


def augment(example, rng):
    words = example["text"].split()
    return {"dropped": " ".join(w for w in words if rng.random() > 0.1)}


ds = splits("k11")["train"]
ds = ds.map(augment, fn_kwargs={"rng": np.random.default_rng(42)})
ds = ds.shuffle(seed=7)
print(ds._fingerprint)
