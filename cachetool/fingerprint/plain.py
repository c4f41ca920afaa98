"""`datasets`' `Hasher` for plain values, without importing `datasets` or dill.

For JSON-like values (str, int, float, bool, None, lists, tuples and dicts of them), dill pickles
exactly like the pure-Python pickler of the standard library; `datasets` adds two rules (dict items
are sorted, strings are never memoized). That is enough to recompute the fingerprints `datasets`
derives from paths and `state.json`, cheaply, in `cachetool ls`.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable, Mapping
from typing import Any

import xxhash

_PROTOCOL = 4  # dill.settings["protocol"] on Python 3.11 (pickle.DEFAULT_PROTOCOL)


# The pure-Python pickler (the one dill extends); typeshed does not describe it.
_PythonPickler: Any = pickle._Pickler


class _PlainPickler(_PythonPickler):
    def memoize(self, obj: Any) -> None:
        if type(obj) is not str:
            super().memoize(obj)

    def _batch_setitems(self, items: Iterable[Any], *args: Any) -> None:
        try:
            ordered = sorted(items)
        except TypeError:
            ordered = sorted(items, key=lambda kv: hash_plain(kv[0]))
        super()._batch_setitems(iter(ordered), *args)


def dumps_plain(value: Any) -> bytes:
    buf = io.BytesIO()
    _PlainPickler(buf, protocol=_PROTOCOL).dump(value)
    return buf.getvalue()


def hash_plain(value: Any) -> str:
    """`datasets.fingerprint.Hasher.hash(value)` for a plain value."""
    return xxhash.xxh64(dumps_plain(value)).hexdigest()


class PlainHasher:
    """`datasets.fingerprint.Hasher` restricted to plain values."""

    def __init__(self) -> None:
        self.m = xxhash.xxh64()

    def update(self, value: Any) -> None:
        self.m.update(f"=={type(value)}==".encode())
        self.m.update(hash_plain(value).encode())

    def hexdigest(self) -> str:
        return str(self.m.hexdigest())


def source_split_fingerprint(relative_data_dir: str, split: str) -> str:
    """The fingerprint `DatasetBuilder.as_dataset` gives a prepared split: the hash of the builder
    folder relative to the cache root (`csv/default-…/0.0.0/<hash>`) and the split name."""
    h = PlainHasher()
    h.update(relative_data_dir)
    h.update(split)
    return h.hexdigest()


def update_fingerprint_plain(fingerprint: str, transform: str, args: Mapping[str, Any]) -> str:
    """`datasets.fingerprint.update_fingerprint` for plain-valued arguments."""
    h = PlainHasher()
    h.update(fingerprint)
    h.update(transform)
    for key in sorted(args):
        h.update(key)
        h.update(args[key])
    return h.hexdigest()


def loaded_fingerprint(state: Mapping[str, Any]) -> str | None:
    """The fingerprint a dataset has right after `load_from_disk`: `state.json`'s `_fingerprint` passed
    through the `with_format(...)` that `Dataset.load_from_disk` ends with (an in-place `set_format`).
    Arguments equal to their defaults are dropped, as `format_kwargs_for_fingerprint` does."""
    fp = state.get("_fingerprint")
    if not isinstance(fp, str):
        return None
    args: dict[str, Any] = {"format_kwargs": state.get("_format_kwargs") or {}}
    if state.get("_format_type") is not None:
        args["type"] = state["_format_type"]
    if state.get("_format_columns") is not None:
        args["columns"] = state["_format_columns"]
    if state.get("_output_all_columns"):
        args["output_all_columns"] = True
    return update_fingerprint_plain(fp, "datasets.arrow_dataset.Dataset.set_format", args)
