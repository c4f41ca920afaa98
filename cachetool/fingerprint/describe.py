"""What a hash-tree node shows a person: its type name, a few words, a bounded repr."""

from __future__ import annotations

import datetime
import itertools
import reprlib
import types
from typing import Any

__all__ = ["LEAF_MODULES", "describe", "short_repr", "type_name"]

_REPR_LIMIT = 100

# Values of these libraries are leaves (`decompose` keeps them whole) and their type names keep the
# library's name: they are large (arrays, tables, models) and their internal layout is not what a
# person would fix.
LEAF_MODULES = (
    "numpy",
    "pyarrow",
    "pandas",
    "torch",
    "tensorflow",
    "jax",
    "jaxlib",
    "scipy",
    "PIL",
    "polars",
    "transformers",
    "tokenizers",
)

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = 6
_repr.maxtuple = 6
_repr.maxset = 6
_repr.maxfrozenset = 6
_repr.maxdict = 4
_repr.maxlevel = 2


def type_name(obj: Any) -> str:
    cls = type(obj)
    module = getattr(cls, "__module__", "") or ""
    name = getattr(cls, "__qualname__", cls.__name__)
    if module in ("builtins", "__main__") or module.startswith("_"):
        return str(name)
    top = module.split(".")[0]
    return f"{top}.{name}" if top in LEAF_MODULES or top == "datasets" else str(name)


def _elem_desc(items: list[Any]) -> str:
    names = {type(x).__name__ for x in items}
    return f" {names.pop()}" if len(names) == 1 else ""


def describe(obj: Any) -> str:
    """A few words for a person: ``frozenset of 12 str``, ``function 'clean'``, ``code 'f'``."""
    try:
        if isinstance(obj, (set, frozenset, list, tuple)):
            return f"{type_name(obj)} of {len(obj)}{_elem_desc(list(itertools.islice(obj, 200)))}"
        if isinstance(obj, dict):
            return f"{type_name(obj)} of {len(obj)}"
        if isinstance(obj, types.FunctionType):
            return f"function {obj.__qualname__!r}"
        if isinstance(obj, types.MethodType):
            return f"method {getattr(obj.__func__, '__qualname__', '?')!r}"
        if isinstance(obj, types.CodeType):
            return f"code {obj.co_qualname if hasattr(obj, 'co_qualname') else obj.co_name!r}"
        if isinstance(obj, type):
            return f"class {obj.__qualname__!r}"
        if isinstance(obj, (str, bytes)):
            return f"{type(obj).__name__} of {len(obj)}"
    except Exception:
        pass
    return type_name(obj)


def short_repr(obj: Any) -> str:
    """A bounded repr with control characters escaped; never raises."""
    try:
        if isinstance(obj, types.FunctionType):
            text = f"<function {obj.__module__}.{obj.__qualname__}>"
        elif isinstance(obj, types.CodeType):
            text = f"<code {obj.co_name}>"
        elif isinstance(obj, types.ModuleType):
            text = f"<module {obj.__name__}>"
        elif isinstance(obj, (datetime.datetime, datetime.date, datetime.time)):
            text = obj.isoformat()
        else:
            text = _repr.repr(obj)
    except Exception as e:
        text = f"<{type_name(obj)}: repr failed: {type(e).__name__}>"
    if len(text) > _REPR_LIMIT:
        text = text[: _REPR_LIMIT - 3] + "..."
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
