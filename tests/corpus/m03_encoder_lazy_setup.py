"""A callable preprocessor that configures its tokenizer on its first call.

datasets issue #3638 (a tokenizer's truncation state is set by the first encoding call) in the
shape of a class: `self.ready` and the tokenizer's truncation change when the map runs.
"""

from corpus_data import splits, word_tokenizer


class Encoder:
    def __init__(self, max_length):
        self.tok = word_tokenizer()
        self.max_length = max_length
        self.ready = False

    def __call__(self, batch):
        if not self.ready:
            self.tok.enable_truncation(max_length=self.max_length)
            self.ready = True
        return {"ids": [e.ids for e in self.tok.encode_batch(batch["text"])]}


dd = splits("m03")
dd = dd.map(Encoder(5), batched=True)
print(dd["test"]._fingerprint)
