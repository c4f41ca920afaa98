"""A label map whose insertion order follows a set (cf. huggingface/datasets#3847: a vocabulary
dict built per run; label maps built from `set(labels)` in transformers examples)."""

from datasets import Dataset

labels = ["pos", "neg", "neutral", "mixed", "other"]
label2id = {}
for name in set(labels):
    label2id[name] = len(label2id)


def encode(example):
    return {"y": label2id[example["label"]]}


ds = Dataset.from_dict({"label": ["pos", "neg", "other"]})
ds = ds.map(encode)
print(ds._fingerprint)
