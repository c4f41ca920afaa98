"""A ThreadPoolExecutor in a global, used by the mapped function to normalise texts.

datasets issue #5536 ("Failure to hash function when using .map()"): an object datasets cannot
pickle makes it fall back to a random fingerprint; the part that fails is the pool's work queue.
"""

from concurrent.futures import ThreadPoolExecutor

from corpus_data import splits

POOL = ThreadPoolExecutor(max_workers=2)


def normalize(batch):
    return {"norm": list(POOL.map(str.upper, batch["text"]))}


ds = splits("m09")["train"]
ds = ds.map(normalize, batched=True)
print(ds._fingerprint)
