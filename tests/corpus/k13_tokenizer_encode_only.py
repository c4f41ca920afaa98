"""Control for m01-m04: a tokenizer only used to encode (datasets issue #5985's shape without the
state change) over both splits of a DatasetDict."""

from corpus_data import splits, word_tokenizer

tok = word_tokenizer()


def tokenize(batch):
    return {"ids": [e.ids for e in tok.encode_batch(batch["text"])]}


dd = splits("k13")
dd = dd.map(tokenize, batched=True)
print(dd["test"]._fingerprint)
