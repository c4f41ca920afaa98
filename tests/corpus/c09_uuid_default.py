"""A run id made with uuid4() as a default argument value."""

import uuid

from datasets import Dataset


def tag(example, run_id=str(uuid.uuid4())):
    return {"run": run_id}


ds = Dataset.from_dict({"text": ["a", "b", "c"]})
ds = ds.map(tag)
print(ds._fingerprint)
