"""Word dropout with an unseeded `random.Random()` on the callable: the culprit is the generator
(`.rng`), not the 625 ints of its state, each read as a value of its own."""

import random

from corpus_data import splits


class Dropout:
    def __init__(self, p):
        self.p = p
        self.rng = random.Random()

    def __call__(self, ex):
        return {"text": " ".join(w for w in ex["text"].split() if self.rng.random() > self.p)}


print(splits("leaf3")["train"].map(Dropout(0.1))._fingerprint)
