"""A `tokenizers.Tokenizer` whose padding the first map turns on, then a second map hashes it
(cf. huggingface/datasets#5985 and #6179: the tokenizer's state changes once called with padding)."""

import corpus_data
from datasets import load_dataset

tok = corpus_data.word_tokenizer()
ds = load_dataset("json", data_files=corpus_data.data_files("u13"), split="train")


def encode(example):
    tok.enable_padding(pad_id=1, pad_token="[PAD]", length=12)
    return {"ids": tok.encode(example["text"]).ids}


ds = ds.map(encode)
ds = ds.map(lambda ex, tok: {"n": len(tok.encode(ex["text"]).ids)}, fn_kwargs={"tok": tok})
print(ds._fingerprint)
