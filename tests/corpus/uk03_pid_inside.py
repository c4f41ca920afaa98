"""Control of u03: the process id is read inside the function, and the host name (the same in every
run on one machine) is captured."""

import os
import socket

from datasets import Dataset


def tagger():
    host = socket.gethostname()

    def tag(example):
        return {"shard": f"{host}-{os.getpid()}"}

    return tag


ds = Dataset.from_dict({"x": [1, 2, 3]})
ds = ds.map(tagger(), load_from_cache_file=False)
print(ds._fingerprint)
