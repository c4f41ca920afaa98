"""Control of u06: the dict is built from the sorted set and dumped with sort_keys."""

import json

from datasets import Dataset

special = {"<pad>", "<eos>", "<bos>", "<unk>", "<sep>"}
config = json.dumps({tok: i for i, tok in enumerate(sorted(special))}, sort_keys=True)


def annotate(example, config):
    return {"n": len(config)}


ds = Dataset.from_dict({"x": [1, 2, 3]})
ds = ds.map(annotate, fn_kwargs={"config": config})
print(ds._fingerprint)
