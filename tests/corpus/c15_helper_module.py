"""The map function comes from a factory in a helper module next to the script."""

from c15_helpers import make_language_filter
from datasets import Dataset

ds = Dataset.from_dict(
    {"text": ["hello", "hallo", "ciao", "hej", "hola"], "lang": ["en", "de", "it", "sv", "es"]}
)
ds = ds.filter(make_language_filter(["en", "de", "it", "es", "fr"]))
print(ds._fingerprint)
