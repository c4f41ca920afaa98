"""`Dataset.from_generator(fingerprint=uuid4().hex)`: a given fingerprint, new in every run. The
dataset it makes has that fingerprint, so the map after it is downstream of it, not a cause."""

import uuid

from datasets import Dataset


def rows():
    for i in range(5):
        yield {"i": i}


ds = Dataset.from_generator(rows, fingerprint=uuid.uuid4().hex)
print(ds.map(lambda ex: {"j": ex["i"] + 1})._fingerprint)
