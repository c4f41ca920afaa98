"""Short, safe descriptions of what a step was given: the operation and transform names `datasets`
hashed, reprs of small plain values, summaries of large ones, and (determinism runs) hash trees.

Nothing here calls a user-defined `__repr__`, and nothing raises into a traced call.
"""

from __future__ import annotations

from typing import Any

from cachetool.history.records import ColumnHead

__all__ = [
    "COLUMN_HEAD",
    "column_heads",
    "describe_value",
    "hash_tree",
    "operation_of",
    "safe_repr",
    "transform_string",
    "try_hash",
    "type_name",
]


def operation_of(transform: Any) -> str:
    """`datasets.arrow_dataset.Dataset.filter@2.0.1` -> `filter`; `..._map_single` -> `map`."""
    if callable(transform):
        name = getattr(transform, "__name__", "transform")
    else:
        name = str(transform).split("@", 1)[0].rsplit(".", 1)[-1]
    if name == "_map_single":
        return "map"
    if name == "_concatenate_map_style_datasets":
        return "concatenate_datasets"
    return name.lstrip("_") or "transform"


def transform_string(transform: Any) -> str:
    if isinstance(transform, str):
        return transform
    module = getattr(transform, "__module__", None) or ""
    qualname = getattr(transform, "__qualname__", None) or type(transform).__name__
    return f"{module}.{qualname}" if module else qualname


_PLAIN = (bool, int, float, type(None))


def safe_repr(value: Any, budget: int = 120) -> str | None:
    """A short repr of small plain values (numbers, short strings, small containers of them);
    None for anything else. Never calls a user-defined `__repr__`."""
    out = _safe_repr(value, budget, 3)
    return out if out is not None and len(out) <= budget else None


def _safe_repr(value: Any, budget: int, depth: int) -> str | None:
    t = type(value)
    if t in _PLAIN:
        return repr(value)
    if t is str:
        return repr(value) if len(value) <= budget else None
    if depth <= 0:
        return None
    if t in (list, tuple, set, frozenset):
        if len(value) > 12:
            return None
        items = sorted(value, key=repr) if t in (set, frozenset) else value
        parts = []
        for v in items:
            r = _safe_repr(v, budget, depth - 1)
            if r is None:
                return None
            parts.append(r)
        body = ", ".join(parts)
        if t is list:
            return f"[{body}]"
        if t is tuple:
            return f"({body}{',' if len(parts) == 1 else ''})"
        return ("{" + body + "}") if parts and t is set else f"{t.__name__}({{{body}}})"
    if t is dict:
        if len(value) > 12:
            return None
        parts = []
        for k, v in value.items():
            rk = _safe_repr(k, budget, depth - 1)
            rv = _safe_repr(v, budget, depth - 1)
            if rk is None or rv is None:
                return None
            parts.append(f"{rk}: {rv}")
        return "{" + ", ".join(parts) + "}"
    return None


_NUMBER_KINDS = {"int": "ints", "float": "floats", "bool": "bools", "str": "strings"}


def describe_value(value: Any, digest: str | None, budget: int = 120) -> str | None:
    """A bounded description of an argument too large or too rich for `safe_repr`: a range as
    written (`range(0, 20000)`), a long sequence as its length, element kind and digest
    (`20000 ints, digest 3f2a…`), `Features` as `name: dtype` pairs; None for anything else.
    Never calls a user-defined `__repr__`."""
    try:
        if type(value) is range:
            return repr(value)
        t = type(value)
        if t.__name__ == "Features" or (t is dict and value and all(_is_feature(v) for v in value.values())):
            body = ", ".join(f"{k}: {_feature_str(v)}" for k, v in value.items())
            return body if len(body) <= budget else body[: budget - 1] + "…"
        if t in (list, tuple) or t.__name__ == "ndarray":
            n = len(value)
            kinds = {type(x).__name__ for x in value[:64]} if t in (list, tuple) else {str(value.dtype)}
            kind = next(iter(kinds)) if len(kinds) == 1 else "value"
            noun = _NUMBER_KINDS.get(kind, kind + " values" if t.__name__ == "ndarray" else f"{kind}s")
            for prefix, word in (("int", "ints"), ("uint", "ints"), ("float", "floats")):
                if kind.startswith(prefix) and t.__name__ == "ndarray":
                    noun = word
            return f"{n} {noun}" + (f", digest {digest}" if digest else "")
    except Exception:  # an odd object: no description rather than a failed record
        return None
    return None


def _is_feature(value: Any) -> bool:
    return type(value).__module__.startswith("datasets.features")


def _feature_str(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, str):
        return dtype
    return type(value).__name__


_TYPE_NAMES: dict[type, str] = {}


def type_name(value: Any) -> str:
    t = type(value)
    name = _TYPE_NAMES.get(t)
    if name is None:
        name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
        _TYPE_NAMES[t] = name
    return name


def hash_tree(value: Any) -> Any:
    """The hash tree of `value` (`cachetool.fingerprint.tree`), or an error node."""
    try:
        from cachetool.fingerprint.tree import build_tree
    except Exception:  # the tree module is optional for tracing
        return None
    try:
        return build_tree(value)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


#: Values per column kept for a dataset built in memory (determinism runs), to name the first one
#: that differs between runs.
COLUMN_HEAD = 50


def column_heads(dataset: Any) -> dict[str, ColumnHead]:
    """Per column of an in-memory dataset: the digest of the column and the short reprs of its first
    values, so that a source built at run time (`from_pandas` of a frame with a timestamp column)
    is explained by the column and the first value that differs."""
    from cachetool.fingerprint.decompose import short_repr

    out: dict[str, ColumnHead] = {}
    try:
        table = dataset.data.table
        for name in table.column_names[:64]:
            column = table.column(name)
            out[str(name)] = ColumnHead(
                try_hash(column), tuple(short_repr(v) for v in column.slice(0, COLUMN_HEAD).to_pylist())
            )
    except Exception:  # an odd table: the fingerprint still says the source differs
        return out
    return out


def try_hash(value: Any) -> str | None:
    """`Hasher.hash(value)`, or None when it cannot be pickled."""
    try:
        from cachetool.fingerprint.hashing import try_hash as digest_or_error
    except Exception:  # the fingerprint package is optional for tracing
        return None
    return digest_or_error(value)[0]
