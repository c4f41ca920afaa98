"""A `pathlib.Path` to a fresh temporary folder held on the mapped object (cf.
huggingface/datasets#7986: per-run state on `self`)."""

import shutil
import tempfile
from pathlib import Path

from datasets import Dataset


class Writer:
    def __init__(self):
        self.scratch = Path(tempfile.mkdtemp(prefix="scratch-"))

    def __call__(self, example, idx):
        return {"path": str(self.scratch / f"{idx}.bin")}


writer = Writer()
ds = Dataset.from_dict({"x": [1, 2, 3]})
ds = ds.map(writer, with_indices=True)
shutil.rmtree(writer.scratch)
print(ds._fingerprint)
