"""A vocabulary numbered while iterating a set of words (a CTC or char-level tokenizer built by
hand, as in the wav2vec2 fine-tuning examples): the word -> id mapping follows PYTHONHASHSEED, and
the mapped function that encodes with it hashes the mapping."""

from corpus_data import splits

ds = splits("c21")["train"]
words = {w for text in ds["text"] for w in text.split()}
vocab = {w: i for i, w in enumerate(words)}


def encode(ex):
    return {"ids": [vocab[w] for w in ex["text"].split()]}


print(ds.map(encode)._fingerprint)
