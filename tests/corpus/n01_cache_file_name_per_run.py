"""Cache files named by the script in a folder made anew by each run, or with the time; a source
loaded into a new temporary `cache_dir`.

Neither `cache_file_name` (nor the `indices_cache_file_name` of shuffle, sort, select and
train_test_split) nor `cache_dir` is hashed: the fingerprints are the same in every run, but a rerun
looks for another file, never finds the one the last run wrote and computes the step again.
"""

import os
import tempfile
import time

from corpus_data import data_files, splits
from datasets import load_dataset

ds = splits("n01")["train"]
loaded = load_dataset("json", data_files=data_files("n01-dir"), cache_dir=tempfile.mkdtemp())
lengths = ds.map(
    lambda ex: {"n": len(ex["text"])}, cache_file_name=os.path.join(tempfile.mkdtemp(), "lengths.arrow")
)
shuffled = lengths.shuffle(seed=0, indices_cache_file_name=os.path.join(tempfile.mkdtemp(), "order.arrow"))
by_text = lengths.sort("text", indices_cache_file_name=os.path.join(tempfile.mkdtemp(), "by_text.arrow"))
picked = lengths.select([2, 0], indices_cache_file_name=os.path.join(tempfile.mkdtemp(), "picked.arrow"))
parts = lengths.train_test_split(
    test_size=0.5,
    seed=0,
    train_indices_cache_file_name=os.path.join(tempfile.mkdtemp(), "train.arrow"),
    test_indices_cache_file_name=os.path.join(tempfile.mkdtemp(), "test.arrow"),
)
stamped_folder = os.path.join(tempfile.gettempdir(), "n01-stamped")
os.makedirs(stamped_folder, exist_ok=True)
words = ds.map(
    lambda ex: {"words": len(ex["text"].split())},
    cache_file_name=os.path.join(stamped_folder, f"words-{time.time_ns()}.arrow"),
)
print(lengths._fingerprint, shuffled._fingerprint, parts["train"]._fingerprint, words._fingerprint)
