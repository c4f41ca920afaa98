"""The tokenizer is passed through `fn_kwargs` and configured inside the function.

datasets issues #3638 and #5985: the hashed `fn_kwargs` carries the tokenizer, whose truncation
state changes when the first split is mapped.
"""

from corpus_data import splits, word_tokenizer


def tokenize(batch, tok, max_length):
    tok.enable_truncation(max_length=max_length)
    return {"ids": [e.ids for e in tok.encode_batch(batch["text"])]}


dd = splits("m10")
dd = dd.map(tokenize, batched=True, fn_kwargs={"tok": word_tokenizer(), "max_length": 6})
print(dd["test"]._fingerprint)
