"""An exporter object that writes side files to a mkdtemp() folder held on self."""

import os
import shutil
import tempfile

from datasets import Dataset


class Exporter:
    def __init__(self):
        self.out_dir = tempfile.mkdtemp(prefix="export-")

    def __call__(self, example, idx):
        return {"path": os.path.join(self.out_dir, f"{idx}.txt")}


exporter = Exporter()
ds = Dataset.from_dict({"text": ["a", "b", "c"]})
ds = ds.map(exporter, with_indices=True)
shutil.rmtree(exporter.out_dir)
print(ds._fingerprint)
