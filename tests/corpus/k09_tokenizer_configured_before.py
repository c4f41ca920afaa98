"""Control for m01: the tokenizer is configured before the first map (the fix datasets issue
#3638 recommends), so the function no longer changes it and every split's fingerprint is stable."""

from corpus_data import splits, word_tokenizer

tok = word_tokenizer()
tok.enable_truncation(max_length=4)


def tokenize(batch):
    return {"ids": [e.ids for e in tok.encode_batch(batch["text"])]}


dd = splits("k09")
dd = dd.map(tokenize, batched=True)
print(dd["test"]._fingerprint)
