"""Helpers imported by k07_imported_function.py."""


def normalize(example):
    # A set literal here is harmless: the function is pickled by reference (module + name).
    words = [w for w in example["text"].lower().split() if w not in {"the", "a", "an"}]
    return {"text": " ".join(words)}
