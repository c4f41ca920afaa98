"""`Dataset.from_generator` over a module list built from a set: the generator is hashed into the
source's config id; the culprit is the list it reads."""

from datasets import Dataset

WORDS = list({"alpha", "beta", "gamma", "delta", "epsilon", "zeta"})


def rows():
    for i, word in enumerate(WORDS):
        yield {"id": i, "word": word}


print(Dataset.from_generator(rows).map(lambda ex: {"n": len(ex["word"])})._fingerprint)
