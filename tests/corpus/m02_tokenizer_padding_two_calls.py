"""Padding switched on inside a closure's tokenizer; the same function maps two datasets in turn.

datasets issue #5985 ("Cannot reuse tokenizer object for dataset map"): after the first map ran, the
tokenizer pickles differently, so the second map's fingerprint changes once the first is cached.
"""

from corpus_data import splits, word_tokenizer


def make_tokenize(tok):
    def tokenize(batch):
        tok.enable_padding(pad_id=1, pad_token="[PAD]", length=12)
        return {"ids": [e.ids for e in tok.encode_batch(batch["text"])]}

    return tokenize


tokenize = make_tokenize(word_tokenizer())
dd = splits("m02")
train = dd["train"].map(tokenize, batched=True)
test = dd["test"].map(tokenize, batched=True)
print(test._fingerprint)
