"""A module-level config object whose `languages` field is a frozenset."""

from types import SimpleNamespace

from datasets import Dataset

CONFIG = SimpleNamespace(languages=frozenset(["en", "de", "fr", "it", "es"]), min_len=2)


def keep(example):
    return example["lang"] in CONFIG.languages and len(example["text"]) >= CONFIG.min_len


ds = Dataset.from_dict({"text": ["hello", "hallo", "ciao", "hej"], "lang": ["en", "de", "it", "sv"]})
ds = ds.filter(keep)
print(ds._fingerprint)
