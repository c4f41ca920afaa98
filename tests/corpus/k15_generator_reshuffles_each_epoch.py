"""Control: one seeded numpy Generator reshuffles the dataset each epoch. `shuffle(generator=rng)`
draws from the generator whether it computes the permutation or loads it from the cache (datasets
5.x), so every run sees the same generator state at each epoch."""

import numpy as np
from corpus_data import splits

rng = np.random.default_rng(42)
ds = splits("k15")["train"]
for epoch in range(2):
    shuffled = ds.shuffle(generator=rng)
    shuffled = shuffled.map(lambda ex: {"words": len(ex["text"].split())})
    print(epoch, shuffled._fingerprint)
