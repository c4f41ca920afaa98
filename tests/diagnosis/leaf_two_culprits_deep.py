"""A mapped callable holding a config of dataclasses four levels deep whose stop words are a
frozenset, an enum beside it, and an unseeded numpy RandomState: two culprits in one step, each
named at its leaf."""

import dataclasses
import enum

import numpy as np
from corpus_data import splits


class Mode(enum.Enum):
    LOWER = 1
    UPPER = 2


@dataclasses.dataclass(frozen=True)
class Leaf:
    stop: frozenset
    mode: Mode = Mode.LOWER


@dataclasses.dataclass
class Inner:
    leaf: Leaf


@dataclasses.dataclass
class Outer:
    inner: Inner


@dataclasses.dataclass
class Config:
    outer: Outer
    tags: dict


class Clean:
    def __init__(self, config):
        self.config = config
        self.rs = np.random.RandomState()

    def __call__(self, ex):
        stop = self.config.outer.inner.leaf.stop
        return {"text": " ".join(w for w in ex["text"].split() if w not in stop)}


WORDS = frozenset({"the", "a", "in", "on", "and", "cat", "dog", "bird"})
cfg = Config(Outer(Inner(Leaf(WORDS))), {"k": 1})
print(splits("leaf1")["train"].map(Clean(cfg))._fingerprint)
