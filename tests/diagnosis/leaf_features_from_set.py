"""`load_dataset(..., features=)` with ClassLabel names from a set: hashed into the name of the
source's cache folder, so the source differs; the culprit is the names, not a file."""

from corpus_data import data_files
from datasets import ClassLabel, Features, Value, load_dataset

LABELS = ["negative", "positive", "neutral", "mixed", "unknown", "spam"]
features = Features(
    {"id": Value("int64"), "text": Value("string"), "label": ClassLabel(names=list(set(LABELS)))}
)
ds = load_dataset("json", data_files=data_files("leaf5")["train"], split="train", features=features)
print(ds.map(lambda ex: {"n": len(ex["text"])})._fingerprint)
