"""Control for m01: the map switches truncation on, but nothing hashes the tokenizer afterwards (one
split, one map), so no fingerprint depends on it (datasets issue #3638 only bites on a later hash)."""

from corpus_data import splits, word_tokenizer

tok = word_tokenizer()


def tokenize(batch):
    tok.enable_truncation(max_length=4)
    return {"ids": [e.ids for e in tok.encode_batch(batch["text"])]}


ds = splits("k12")["train"]
ds = ds.map(tokenize, batched=True)
ds = ds.map(lambda ex: {"n": len(ex["ids"])})
print(ds._fingerprint)
