"""Shared by the corpus pipelines: small JSON Lines splits on disk and a word-level tokenizer.

The files are written once, atomically, with a fixed modification time, so `load_dataset` gives the
same source fingerprint in every run; derived datasets are then cached on disk (a dataset built in
memory is never cached, so it could not show what a warm cache does). The tokenizer is a real
`tokenizers.Tokenizer` built from the texts, with no download.
"""

import json
import os
import tempfile

TEXTS = {
    "train": [
        "the cat sat on the mat",
        "a dog ran in the park",
        "the bird sang a song",
        "cats and dogs play together in the garden today",
    ],
    "test": [
        "the dog sat on a mat",
        "a cat sang in the park",
        "birds play in the garden",
    ],
}
FIXED_MTIME = 1_700_000_000


def _folder() -> str:
    folder = os.path.join(tempfile.gettempdir(), f"cachetool-corpus-data-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    return folder


def _write_once(path: str, text: str) -> str:
    """Write `path` once, atomically, with the fixed modification time; return it."""
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.utime(tmp, (FIXED_MTIME, FIXED_MTIME))
        os.replace(tmp, path)  # concurrent runs never see a half-written file
    return path


def data_files(name: str) -> dict[str, str]:
    files = {}
    for split, texts in TEXTS.items():
        rows = (json.dumps({"id": i, "text": text, "label": i % 2}) + "\n" for i, text in enumerate(texts))
        files[split] = _write_once(os.path.join(_folder(), f"{name}-{split}.jsonl"), "".join(rows))
    return files


def csv_file(name: str, rows: int = 40) -> str:
    """A CSV file of `rows` rows: ``text`` and a string ``label`` (``neg``/``pos``)."""
    lines = [f"sample text number {i},{('neg', 'pos')[i % 2]}\n" for i in range(rows)]
    return _write_once(os.path.join(_folder(), f"{name}.csv"), "text,label\n" + "".join(lines))


def splits(name: str):
    """A DatasetDict with a train and a test split, read from disk."""
    from datasets import load_dataset

    return load_dataset("json", data_files=data_files(name))


def word_tokenizer():
    """A WordLevel tokenizer over the corpus texts (sorted vocabulary: the same in every run)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = sorted({w for texts in TEXTS.values() for t in texts for w in t.split()})
    vocab = {"[UNK]": 0, "[PAD]": 1}
    for w in words:
        vocab[w] = len(vocab)
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return tok
