"""A run name stamped with `strftime("%Y%m%d-%H%M%S-%f")` kept on the mapped object."""

import datetime

from datasets import Dataset


class Tagger:
    def __init__(self):
        self.run_name = "run-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")

    def __call__(self, example):
        return {"run": example["x"]}


ds = Dataset.from_dict({"x": [1, 2, 3]})
ds = ds.map(Tagger())
print(ds._fingerprint)
