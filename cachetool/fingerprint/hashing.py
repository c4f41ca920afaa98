"""Hash any object exactly as `datasets.fingerprint.Hasher.hash` does: with `datasets`' own pickler
when it is imported, else a replica of it (so `cachetool.checkpoint` does not import `datasets`);
`hash_plain` for plain values needs neither `datasets` nor dill (for `cachetool ls`).
"""

from __future__ import annotations

import functools
import io
import os
import pickle
import sys
from collections.abc import Callable, Iterable, Mapping
from types import CodeType
from typing import Any


def hash_bytes(data: bytes) -> str:
    """``Hasher.hash_bytes``: the 16-hex-digit xxh64 of some bytes."""
    import xxhash  # not on `cachetool verify --help`'s path (the scan imports this module)

    return str(xxhash.xxh64(data).hexdigest())


# Types datasets' pickler special-cases when their library is loaded; their values go to datasets.
_DATASETS_SPECIAL_MODULES = ("torch", "transformers", "regex", "spacy", "tiktoken")

_DATASETS_DUMPS: Callable[[Any], bytes] | None = None


def _datasets_dumps() -> Callable[[Any], bytes] | None:
    global _DATASETS_DUMPS
    if _DATASETS_DUMPS is None:
        try:
            try:
                from datasets.utils._dill import dumps as datasets_dumps
            except ImportError:  # datasets < 2.15 kept its pickler in py_utils
                from datasets.utils.py_utils import dumps as datasets_dumps
        except Exception:  # datasets half-imported, or an incompatible release
            return None
        _DATASETS_DUMPS = datasets_dumps
    return _DATASETS_DUMPS


def dumps(obj: Any) -> bytes:
    """Pickle `obj` the way `datasets` does for fingerprinting. Raises what the pickler raises."""
    if "datasets" in sys.modules or any(m in sys.modules for m in _DATASETS_SPECIAL_MODULES):
        fn = _datasets_dumps()
        if fn is not None:
            return fn(obj)
    return _replica_dumps(obj)


def hash_object(obj: Any) -> str:
    """``datasets.fingerprint.Hasher.hash(obj)``. Raises whatever pickling raises."""
    return hash_bytes(dumps(obj))


def try_hash(obj: Any) -> tuple[str | None, str | None]:
    """``(digest, None)``, or ``(None, "TypeError: cannot pickle ...")`` when `obj` cannot be pickled."""
    try:
        return hash_object(obj), None
    except Exception as e:  # RecursionError included; said as a user would see it
        return None, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def by_reference(fn: Any) -> bool:
    """Whether dill (and so `datasets`) pickles this function or class as module + name, not by
    value."""
    module = getattr(fn, "__module__", None)
    if module in (None, "__main__", "__mp_main__"):
        return False
    qualname = getattr(fn, "__qualname__", "")
    if "<locals>" in qualname or "<lambda>" in qualname:
        return False
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return obj is fn or getattr(obj, "__func__", None) is fn  # a classmethod's function


def pickled_filename(code: CodeType) -> str:
    """The file name `datasets` keeps in a code object's pickle: the base name of its file, or ""
    for a lambda, a notebook cell or a ``<string>``. Renaming a script changes it, so every
    function defined in it hashes differently."""
    name = code.co_filename
    parts = name.split(os.path.sep)
    if (
        name.startswith("<")
        or (len(parts) > 1 and parts[-2].startswith("ipykernel_"))
        or code.co_name == "<lambda>"
    ):
        return ""
    return os.path.basename(name)


# The pure-Python pickler (the one dill extends); typeshed does not describe it.
_PythonPickler: Any = pickle._Pickler


class _HashPickler(_PythonPickler):
    """Pickles as `datasets` does for hashing: a dict's items in sorted order (by the hash of their
    keys, `key`, where keys do not compare), and no string memoised (two equal strings can have
    different ids). For plain values as it is; the replica below adds dill's rules."""

    @staticmethod
    def key(value: Any) -> str:
        return hash_plain(value)

    def memoize(self, obj: Any) -> None:
        if type(obj) is not str:
            super().memoize(obj)

    def _batch_setitems(self, items: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        try:
            ordered = sorted(items)
        except Exception:
            ordered = sorted(items, key=lambda kv: self.key(kv[0]))
        return super()._batch_setitems(iter(ordered), *args, **kwargs)


# --- the replica of datasets.utils._dill, used when datasets is not imported -----------------------

_DILL_NUMPY = ("save_numpy_ufunc", "save_numpy_dtype", "save_numpy_array")


def _replica_dumps(obj: Any) -> bytes:
    pickler_cls = _replica_pickler()
    buf = io.BytesIO()
    pickler_cls(buf, recurse=True).dump(obj)
    return buf.getvalue()


@functools.cache
def _replica_pickler() -> type:
    """Build the replica pickler class once (dill is imported lazily)."""
    import dill

    class Pickler(_HashPickler, dill.Pickler):
        @staticmethod
        def key(value: Any) -> str:
            return hash_object(value)

        # datasets copies dill's table when it is imported, before any numpy value was pickled;
        # dill later adds numpy reducers to its own table only, which datasets never sees.
        dispatch = dill._dill.MetaCatchingDict(
            {t: f for t, f in dill.Pickler.dispatch.items() if getattr(f, "__name__", "") not in _DILL_NUMPY}
        )

    Pickler.dispatch[set] = _save_set
    Pickler.dispatch[CodeType] = _save_code

    if "pyarrow" in sys.modules:
        import pyarrow as pa

        # datasets hashes Arrow tables chunk-independently through reducer functions pickled by
        # value under its own module name; only its own code gives those bytes, so an Arrow value
        # imports datasets (when installed) and uses its reducers.
        Pickler.dispatch[pa.Table] = _arrow_reducer("_save_arrowTable")
        Pickler.dispatch[pa.ChunkedArray] = _arrow_reducer("_save_arrowChunkedArray")

    return Pickler


def _save_set(pickler: Any, obj: Any) -> None:
    """A set pickles sorted (datasets sorts sets), so its order does not change the digest."""
    try:
        args = (sorted(obj),)
    except Exception:
        args = (sorted(obj, key=hash_object),)
    pickler.save_reduce(set, args, obj=obj)


def _save_code(pickler: Any, obj: CodeType) -> None:
    """A code object pickles with its first line number as 1 and its file name as datasets
    normalises it (`pickled_filename`), so moving a function down a file keeps its digest."""
    import dill

    new = hasattr(obj, "co_exceptiontable")  # Python 3.11+: a qualname and an exception table
    args = (
        obj.co_linetable,
        obj.co_argcount,
        obj.co_posonlyargcount,
        obj.co_kwonlyargcount,
        obj.co_nlocals,
        obj.co_stacksize,
        obj.co_flags,
        obj.co_code,
        obj.co_consts,
        obj.co_names,
        obj.co_varnames,
        pickled_filename(obj),
        obj.co_name,
        *((obj.co_qualname,) if new else ()),  # type: ignore[attr-defined,unused-ignore]
        1,
        obj.co_linetable,
        *((obj.co_exceptiontable,) if new else ()),  # type: ignore[attr-defined,unused-ignore]
        obj.co_freevars,
        obj.co_cellvars,
    )
    pickler.save_reduce(dill._dill._create_code, args, obj=obj)


def _arrow_reducer(name: str) -> Callable[[Any, Any], None]:
    def save(pickler: Any, obj: Any) -> None:
        try:
            from datasets.utils import _dill as datasets_dill
        except ImportError:
            pickler.save_reduce(*obj.__reduce_ex__(pickler.proto), obj=obj)
            return
        getattr(datasets_dill, name)(pickler, obj)

    return save


# -- plain values, without dill ------------------------------------------------------------------

_PROTOCOL = 4  # dill.settings["protocol"] on Python 3.11 (pickle.DEFAULT_PROTOCOL)


def hash_plain(value: Any) -> str:
    """`datasets.fingerprint.Hasher.hash(value)` for a plain value."""
    buf = io.BytesIO()
    _HashPickler(buf, protocol=_PROTOCOL).dump(value)
    return hash_bytes(buf.getvalue())


def _hasher(*values: Any) -> str:
    """`datasets.fingerprint.Hasher` fed `values` one by one (`update`), for plain values."""
    import xxhash

    m = xxhash.xxh64()
    for value in values:
        m.update(f"=={type(value)}==".encode())
        m.update(hash_plain(value).encode())
    return str(m.hexdigest())


def source_split_fingerprint(relative_data_dir: str, split: str) -> str:
    """The fingerprint `DatasetBuilder.as_dataset` gives a prepared split: the hash of the builder
    folder relative to the cache root (`csv/default-…/0.0.0/<hash>`) and the split name."""
    return _hasher(relative_data_dir, split)


def update_fingerprint_plain(fingerprint: str, transform: str, args: Mapping[str, Any]) -> str:
    """`datasets.fingerprint.update_fingerprint` for plain-valued arguments."""
    return _hasher(fingerprint, transform, *(v for key in sorted(args) for v in (key, args[key])))


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
