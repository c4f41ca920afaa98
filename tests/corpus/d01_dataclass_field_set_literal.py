"""A set of words three deep, `self.cfg.vocab`: cfg a dataclass on a callable object, its field made
by `default_factory=lambda: {...}`. The set itself pickles sorted; the set literal in the lambda
compiles to a frozenset constant, in hash-seed order, reached both as the field's default factory
and as a closure of the dataclass's `__init__`."""

from dataclasses import dataclass, field

from datasets import Dataset


@dataclass
class Cfg:
    vocab: set = field(default_factory=lambda: {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"})


class Tagger:
    def __init__(self, cfg):
        self.cfg = cfg

    def __call__(self, example):
        return {"known": example["w"] in self.cfg.vocab}


ds = Dataset.from_dict({"w": ["alpha", "x", "zeta"]})
ds = ds.map(Tagger(Cfg()))
print(ds._fingerprint)
