"""Control of u05: the numpy Generator is seeded."""

import numpy as np
from datasets import Dataset


def augment(example, rng):
    return {"y": example["x"] + float(rng.normal())}


ds = Dataset.from_dict({"x": [1.0, 2.0, 3.0]})
ds = ds.map(augment, fn_kwargs={"rng": np.random.default_rng(1234)})
print(ds._fingerprint)
