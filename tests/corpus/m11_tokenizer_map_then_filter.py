"""Truncation is switched on by a map; a later filter uses the same tokenizer.

datasets issue #3638: the filter is hashed after the map ran in a cold run but not in a warm one.
"""

from corpus_data import splits, word_tokenizer

tok = word_tokenizer()


def tokenize(batch):
    tok.enable_truncation(max_length=3)
    return {"ids": [e.ids for e in tok.encode_batch(batch["text"])]}


ds = splits("m11")["train"]
ds = ds.map(tokenize, batched=True)
ds = ds.filter(lambda ex: tok.token_to_id("[PAD]") not in ex["ids"])
print(ds._fingerprint)
