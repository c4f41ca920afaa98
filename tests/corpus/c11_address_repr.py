"""A cache key made from str() of an object: its repr holds a memory address."""

from datasets import Dataset


class Tokenizer:
    def tokenize(self, text):
        return text.lower().split()


tok = Tokenizer()


def tokenize(example, cache_key):
    return {"tokens": tok.tokenize(example["text"])}


ds = Dataset.from_dict({"text": ["Hello World", "Good Bye"]})
ds = ds.map(tokenize, fn_kwargs={"cache_key": str(tok)})
print(ds._fingerprint)
