"""An unseeded numpy Generator passed through fn_kwargs for augmentation (cf.
huggingface/datasets#7986: a random state hashed with the transform)."""

import numpy as np
from datasets import Dataset


def augment(example, rng):
    return {"y": example["x"] + float(rng.normal())}


ds = Dataset.from_dict({"x": [1.0, 2.0, 3.0]})
ds = ds.map(augment, fn_kwargs={"rng": np.random.default_rng()})
print(ds._fingerprint)
