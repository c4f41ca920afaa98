"""Control of n01: the same steps with cache files named by fixed paths, found again by a rerun."""

import os
import tempfile

from corpus_data import data_files, splits
from datasets import load_dataset

folder = os.path.join(tempfile.gettempdir(), "k27-named")
os.makedirs(folder, exist_ok=True)
ds = splits("k27")["train"]
loaded = load_dataset("json", data_files=data_files("k27-dir"), cache_dir=os.path.join(folder, "hf"))
lengths = ds.map(lambda ex: {"n": len(ex["text"])}, cache_file_name=os.path.join(folder, "lengths.arrow"))
shuffled = lengths.shuffle(seed=0, indices_cache_file_name=os.path.join(folder, "order.arrow"))
by_text = lengths.sort("text", indices_cache_file_name=os.path.join(folder, "by_text.arrow"))
picked = lengths.select([2, 0], indices_cache_file_name=os.path.join(folder, "picked.arrow"))
parts = lengths.train_test_split(
    test_size=0.5,
    seed=0,
    train_indices_cache_file_name=os.path.join(folder, "train.arrow"),
    test_indices_cache_file_name=os.path.join(folder, "test.arrow"),
)
print(lengths._fingerprint, shuffled._fingerprint, parts["train"]._fingerprint)
