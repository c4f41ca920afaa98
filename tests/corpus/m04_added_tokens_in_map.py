"""Unknown words are added to the tokenizer while mapping.

datasets issue #3847 ("Datasets' cache not re-used"): special and added tokens change the
tokenizer's pickled state, so a later map that hashes it recomputes.
"""

from corpus_data import splits, word_tokenizer

tok = word_tokenizer()


def tokenize(batch):
    tok.add_tokens(["<new>", "<sep>"])
    return {"ids": [e.ids for e in tok.encode_batch(batch["text"])]}


dd = splits("m04")
dd = dd.map(tokenize, batched=True)
print(dd["test"]._fingerprint)
