"""Control of u01: the label map is built from the sorted labels."""

from datasets import Dataset

labels = ["pos", "neg", "neutral", "mixed", "other"]
label2id = {}
for name in sorted(set(labels)):
    label2id[name] = len(label2id)


def encode(example):
    return {"y": label2id[example["label"]]}


ds = Dataset.from_dict({"label": ["pos", "neg", "other"]})
ds = ds.map(encode)
print(ds._fingerprint)
