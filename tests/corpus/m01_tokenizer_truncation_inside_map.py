"""A raw `tokenizers.Tokenizer` switched to truncation inside the mapped function.

datasets issue #3638 ("AutoTokenizer hash value got change after datasets.map"): the first call
sets truncation on the tokenizer, so the test split (hashed after the train split was mapped)
gets a fingerprint that depends on whether the train split was computed or loaded from the cache.
"""

from corpus_data import splits, word_tokenizer

tok = word_tokenizer()


def tokenize(batch):
    tok.enable_truncation(max_length=4)
    return {"ids": [e.ids for e in tok.encode_batch(batch["text"])]}


dd = splits("m01")
dd = dd.map(tokenize, batched=True)
print(dd["test"]._fingerprint)
