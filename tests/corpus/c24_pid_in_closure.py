"""The process id captured for a per-worker log name: different in every process."""

import os

from corpus_data import splits

ds = splits("c24")["train"]
worker = f"worker-{os.getpid()}"


def tag(ex):
    return {"who": worker}


print(ds.map(tag)._fingerprint)
