"""The label names passed through fn_kwargs as a list built from a set (a classification
script that collects its labels from the data)."""

from corpus_data import splits

ds = splits("c23")["train"]
names = list({w for text in ds["text"] for w in text.split()[:1]} | {"other"})


def label(ex, names):
    first = ex["text"].split()[0]
    return {"label_id": names.index(first) if first in names else -1}


print(ds.map(label, fn_kwargs={"names": names})._fingerprint)
