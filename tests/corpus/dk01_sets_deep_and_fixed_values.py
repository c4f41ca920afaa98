"""Control of d01: sets made at run time, however deep (`self.cfg.vocab`, the values of a dict, a
module-level global the function reads; datasets pickles a set's elements sorted), a frozen
dataclass of ints and the pathlib.Path of a fixed file hash alike in every run."""

import pathlib
from dataclasses import dataclass

from datasets import Dataset

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
STOP = {"the", "a", "an", "of", "in", "on", "and"}
GROUPS = {"animals": {"cat", "dog", "bird", "fish"}, "colors": {"red", "blue", "green", "pink"}}
HERE = pathlib.Path(__file__).resolve().parent / "corpus_data.py"


@dataclass(frozen=True)
class Limits:
    low: int = 1
    high: int = 9


class Cfg:
    def __init__(self):
        self.vocab = set(WORDS)
        self.limits = Limits()


class Tagger:
    def __init__(self):
        self.cfg = Cfg()

    def __call__(self, example):
        return {"known": example["w"] in self.cfg.vocab, "n": self.cfg.limits.high}


def group(example, groups):
    return {"stop": example["w"] in STOP, "g": [k for k, v in sorted(groups.items()) if example["w"] in v]}


def where(example, path=HERE):
    return {"p": path.name}


ds = Dataset.from_dict({"w": ["alpha", "the", "cat", "red"]})
ds = ds.map(Tagger())
ds = ds.map(group, fn_kwargs={"groups": GROUPS})
ds = ds.map(where)
print(ds._fingerprint)
