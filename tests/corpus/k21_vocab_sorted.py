"""Control for c21: the vocabulary numbered over sorted(words)."""

from corpus_data import splits

ds = splits("k21")["train"]
words = {w for text in ds["text"] for w in text.split()}
vocab = {w: i for i, w in enumerate(sorted(words))}


def encode(ex):
    return {"ids": [vocab[w] for w in ex["text"].split()]}


print(ds.map(encode)._fingerprint)
