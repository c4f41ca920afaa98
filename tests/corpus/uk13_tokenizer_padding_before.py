"""Control of u13: padding is set before the first map."""

import corpus_data
from datasets import load_dataset

tok = corpus_data.word_tokenizer()
tok.enable_padding(pad_id=1, pad_token="[PAD]", length=12)
ds = load_dataset("json", data_files=corpus_data.data_files("uk13"), split="train")


def encode(example):
    return {"ids": tok.encode(example["text"]).ids}


ds = ds.map(encode)
ds = ds.map(lambda ex, tok: {"n": len(tok.encode(ex["text"]).ids)}, fn_kwargs={"tok": tok})
print(ds._fingerprint)
