"""A config serialized with json.dumps from a dict built over a set (cf. allenai/open-instruct#1518,
which fingerprints `json.dumps(config, sort_keys=True)` for that reason)."""

import json

from datasets import Dataset

special = {"<pad>", "<eos>", "<bos>", "<unk>", "<sep>"}
config = json.dumps({tok: i for i, tok in enumerate(special)})


def annotate(example, config):
    return {"n": len(config)}


ds = Dataset.from_dict({"x": [1, 2, 3]})
ds = ds.map(annotate, fn_kwargs={"config": config})
print(ds._fingerprint)
