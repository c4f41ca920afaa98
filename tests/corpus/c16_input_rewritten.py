"""The pipeline regenerates its input CSV before loading it, so the source changes every run."""

import os
import tempfile

from datasets import load_dataset

folder = os.path.join(tempfile.gettempdir(), f"cachetool-corpus-c16-{os.getuid()}")
os.makedirs(folder, exist_ok=True)
path = os.path.join(folder, "reviews.csv")
with open(path, "w") as f:
    f.write("text,label\ngreat,1\nawful,0\nfine,1\n")
ds = load_dataset("csv", data_files=path, split="train")
ds = ds.map(lambda ex: {"n": len(ex["text"])})
print(ds._fingerprint)
