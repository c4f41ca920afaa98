"""Hash trees: an object decomposed into the parts its fingerprint is made of, each part hashed.

`datasets` hashes an argument as one pickle; when two runs give two digests, the pickle does not say
which part differed. A hash tree does: the root is the argument (its digest is exactly
``datasets.fingerprint.Hasher.hash(value)``), and each child is a part the pickle contains —

* a function pickled by value: its code (bytecode, constants, names), closure cells by name, the
  globals it references by name, defaults and keyword defaults, its ``__dict__``;
* a bound method: ``__func__`` and ``__self__``; ``functools.partial``: func, args, keywords;
* a class pickled by value (defined in ``__main__``): its attributes and methods;
* any other object: what ``__reduce_ex__`` returns (constructor args, ``__dict__``, slots, items);
* lists, tuples and dicts: their items.

Every node is hashed on its own the way `datasets` hashes a value, so two trees from two processes
can be compared node by node (`cachetool.fingerprint.diff`). Trees are bounded in depth and size:
arrays, tables, tensors and modules are single leaves, long containers show their first items.

A node is a small dict, compact in JSON::

    {"l": "closure 'stop'",      # the access step from the parent ("" at the root)
     "t": "frozenset",           # type name
     "s": "frozenset of 12 str", # what it is, for a person
     "r": "frozenset({'a', ...})",  # a short repr (control characters escaped)
     "d": "1b2c...",             # its digest as datasets computes it, or null
     "e": "TypeError: cannot pickle 'generator' object",  # only when it cannot be pickled
     "o": "9f0e...",             # only for str/list/tuple/dict: a digest that ignores item order
     "x": "depth",               # only when decomposition stopped early (depth, nodes, items, cycle)
     "c": [...]}                 # children, only when there are any
"""

from __future__ import annotations

import datetime
import functools
import itertools
import re
import reprlib
import types
from collections.abc import Iterator
from typing import Any

import xxhash

from cachetool.fingerprint.hashing import pickled_filename, try_hash

__all__ = ["DEFAULT_MAX_DEPTH", "DEFAULT_MAX_ITEMS", "DEFAULT_MAX_NODES", "build_tree", "iter_nodes"]

DEFAULT_MAX_DEPTH = 12
DEFAULT_MAX_NODES = 600
DEFAULT_MAX_ITEMS = 64
_REPR_LIMIT = 100

# Values of these libraries are leaves: they are large (arrays, tables, models) and their internal
# layout is not what a person would fix.
_LEAF_MODULES = (
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
# datasets' data containers are leaves; its small objects (Features, ClassLabel, configs) are not.
_DATASETS_DATA_MODULES = (
    "datasets.arrow_dataset",
    "datasets.table",
    "datasets.iterable_dataset",
    "datasets.dataset_dict",
    "datasets.builder",
)
_SCALARS = (str, bytes, bytearray, int, float, complex, bool, type(None), range, slice)
# Leaves shown by their ISO text: they pickle as bytes, which no person reads.
_TIMES = (datetime.datetime, datetime.date, datetime.time, datetime.timedelta)
_CONTAINERS = (list, tuple, dict, set, frozenset)

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = 6
_repr.maxtuple = 6
_repr.maxset = 6
_repr.maxfrozenset = 6
_repr.maxdict = 4
_repr.maxlevel = 2


def build_tree(
    obj: Any,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_nodes: int = DEFAULT_MAX_NODES,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> dict[str, Any]:
    """Decompose `obj` into a hash tree (a JSON-able dict, see the module docstring).

    The root's ``"d"`` equals ``datasets.fingerprint.Hasher.hash(obj)``, or is None (with ``"e"``
    holding the exception text) when `obj` cannot be pickled; the tree then shows which part fails.
    Never raises for an odd object: a part that cannot be inspected becomes a leaf.
    """
    builder = _Builder(max_depth=max_depth, max_nodes=max_nodes, max_items=max_items)
    return builder.node("", obj, depth=0)


def iter_nodes(
    tree: dict[str, Any], path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every ``(path, node)`` of a tree, depth first; `path` is the labels below the root."""
    yield path, tree
    for child in tree.get("c", ()):
        yield from iter_nodes(child, (*path, child["l"]))


class _Builder:
    def __init__(self, *, max_depth: int, max_nodes: int, max_items: int) -> None:
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.max_items = max_items
        self.count = 0
        # Digests by object id for this build; the objects are kept alive so ids stay unique.
        self._digests: dict[int, tuple[Any, str | None, str | None]] = {}
        self._on_path: set[int] = set()

    def digest(self, obj: Any) -> tuple[str | None, str | None]:
        cached = self._digests.get(id(obj))
        if cached is not None and cached[0] is obj:
            return cached[1], cached[2]
        digest, err = try_hash(obj)
        self._digests[id(obj)] = (obj, digest, err)
        return digest, err

    def node(self, label: str, obj: Any, depth: int) -> dict[str, Any]:
        self.count += 1
        digest, err = self.digest(obj)
        node: dict[str, Any] = {"l": label, "t": _type_name(obj), "s": describe(obj), "r": short_repr(obj)}
        node["d"] = digest
        if err is not None:
            node["e"] = err
        order = _order_free_digest(obj)
        if order is not None:
            node["o"] = order
        parts = list(_children(obj, self.max_items)) if _decomposable(obj) else []
        if not parts:
            return node
        if id(obj) in self._on_path:
            node["x"] = "cycle"
            return node
        if depth >= self.max_depth:
            node["x"] = "depth"
            return node
        if self.count >= self.max_nodes:
            node["x"] = "nodes"
            return node
        children = []
        self._on_path.add(id(obj))
        try:
            for child_label, child in parts:
                if child_label is _MORE:
                    node["x"] = "items"
                    continue
                if self.count >= self.max_nodes:
                    node["x"] = "nodes"
                    break
                children.append(self.node(child_label, child, depth + 1))
        finally:
            self._on_path.discard(id(obj))
        if children:
            node["c"] = children
        return node


_MORE: Any = object()  # a marker label: more items than shown


def _type_name(obj: Any) -> str:
    cls = type(obj)
    module = getattr(cls, "__module__", "") or ""
    name = getattr(cls, "__qualname__", cls.__name__)
    if module in ("builtins", "__main__") or module.startswith("_"):
        return str(name)
    top = module.split(".")[0]
    return f"{top}.{name}" if top in _LEAF_MODULES or top == "datasets" else str(name)


def _elem_desc(items: list[Any]) -> str:
    names = {type(x).__name__ for x in items}
    return f" {names.pop()}" if len(names) == 1 else ""


def describe(obj: Any) -> str:
    """A few words for a person: ``frozenset of 12 str``, ``function 'clean'``, ``code 'f'``."""
    try:
        if isinstance(obj, (set, frozenset, list, tuple)):
            return f"{_type_name(obj)} of {len(obj)}{_elem_desc(list(itertools.islice(obj, 200)))}"
        if isinstance(obj, dict):
            return f"{_type_name(obj)} of {len(obj)}"
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
    return _type_name(obj)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


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
        text = f"<{_type_name(obj)}: repr failed: {type(e).__name__}>"
    if len(text) > _REPR_LIMIT:
        text = text[: _REPR_LIMIT - 3] + "..."
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _order_free_digest(obj: Any) -> str | None:
    """A digest that is the same for the same items in any order, to recognise "built by iterating a
    set": a string with the same characters, a list, tuple or dict with the same items or values."""
    try:
        if isinstance(obj, str):
            if not 2 <= len(obj) <= 100_000:
                return None
            return str(xxhash.xxh64("".join(sorted(obj)).encode("utf-8", "surrogatepass")).hexdigest())
        if isinstance(obj, (list, tuple)):
            values = list(obj)
        elif isinstance(obj, dict):
            values = list(obj.values())
        else:
            return None
        if len(values) < 2 or len(values) > 10_000:
            return None
        keys = sorted(repr(v) for v in values)
        return str(xxhash.xxh64("\x00".join(keys).encode("utf-8", "surrogatepass")).hexdigest())
    except Exception:
        return None


def _by_reference(obj: Any) -> bool:
    """Whether dill pickles this function or class by reference (module + qualname), not by value."""
    try:
        from dill._dill import _locate_function

        return bool(_locate_function(obj, None))
    except Exception:
        return False


def _tokenizer_state(obj: Any) -> dict[str, Any] | None:
    """The parts of a `tokenizers.Tokenizer` as it pickles them (its JSON form: truncation,
    padding, added tokens, model ...), or None for anything else. A map that switches truncation on
    changes exactly one of these, and a person can read which."""
    cls = type(obj)
    if cls.__name__ != "Tokenizer" or not (getattr(cls, "__module__", "") or "").startswith("tokenizers"):
        return None
    try:
        import json

        state = json.loads(obj.to_str())
    except Exception:
        return None
    return state if isinstance(state, dict) else None


#: A small pandas frame or series is shown by its cells (column, then row); a larger one is a leaf.
_MAX_CELLS = 10_000


def _pandas_columns(obj: Any) -> list[tuple[str, Any]] | None:
    """``[(label, values)]`` of a small DataFrame (one list per column) or Series (its values), so
    that a difference reads as the column and row of the cells that differ; None otherwise."""
    cls = type(obj)
    if not (getattr(cls, "__module__", "") or "").startswith("pandas") or cls.__name__ not in (
        "DataFrame",
        "Series",
    ):
        return None
    try:
        if cls.__name__ == "Series":
            if len(obj) > _MAX_CELLS:
                return None
            return [(".values", obj.tolist())]
        if obj.size > _MAX_CELLS:
            return None
        return [(_key_label(col), obj[col].tolist()) for col in obj.columns]
    except Exception:
        return None


def _decomposable(obj: Any) -> bool:
    if isinstance(obj, (_SCALARS, set, frozenset, types.ModuleType, _TIMES)):
        return False
    if _tokenizer_state(obj) is not None or _pandas_columns(obj) is not None:
        return True
    full_module = getattr(type(obj), "__module__", "") or ""
    if full_module.split(".")[0] in _LEAF_MODULES or full_module.startswith(_DATASETS_DATA_MODULES):
        return False
    if isinstance(obj, (types.FunctionType, type)):
        return not _by_reference(obj)
    return not isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType))


def _children(obj: Any, max_items: int) -> Iterator[tuple[str, Any]]:
    """The parts of `obj` as ``(label, value)``; labels are the access steps shown in a path."""
    try:
        yield from _children_unsafe(obj, max_items)
    except Exception:
        return


def _items(seq: list[tuple[str, Any]], max_items: int) -> Iterator[tuple[str, Any]]:
    yield from seq[:max_items]
    if len(seq) > max_items:
        yield _MORE, None


def _key_label(key: Any) -> str:
    text = short_repr(key)
    return f"[{text}]"


def _children_unsafe(obj: Any, max_items: int) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, types.FunctionType):
        yield from _function_children(obj)
    elif isinstance(obj, types.MethodType):
        yield "__func__", obj.__func__
        yield "__self__", obj.__self__
    elif isinstance(obj, types.CodeType):
        yield from _code_children(obj)
    elif isinstance(obj, functools.partial):
        yield "func", obj.func
        for i, arg in enumerate(obj.args):
            yield f"args[{i}]", arg
        for key in sorted(obj.keywords):
            yield f"keywords[{key!r}]", obj.keywords[key]
        # Not obj.__dict__: reading it creates an empty dict, which would change the pickle.
        state = obj.__reduce__()[2]
        extra = state[3] if isinstance(state, tuple) and len(state) > 3 else None
        if isinstance(extra, dict):
            for key in sorted(extra):
                yield f".{key}", extra[key]
    elif isinstance(obj, dict):
        try:
            keys = sorted(obj)
        except Exception:
            keys = sorted(obj, key=repr)
        yield from _items([(_key_label(k), obj[k]) for k in keys], max_items)
    elif isinstance(obj, (list, tuple)):
        yield from _items([(f"[{i}]", v) for i, v in enumerate(obj)], max_items)
    elif isinstance(obj, type):
        yield from _class_children(obj)
    elif isinstance(obj, re.Pattern):
        yield ".pattern", obj.pattern
        yield ".flags", obj.flags
    elif isinstance(obj, types.CellType):
        yield "cell_contents", obj.cell_contents
    elif (state := _tokenizer_state(obj)) is not None:
        for key, value in state.items():
            yield f".{key}", value
    elif (columns := _pandas_columns(obj)) is not None:
        yield from _items(columns, max_items)
    else:
        yield from _object_children(obj, max_items)


def _function_children(fn: types.FunctionType) -> Iterator[tuple[str, Any]]:
    code = fn.__code__
    yield "code", code
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        yield f"closure {name!r}", value
    try:
        from dill.detect import globalvars

        referenced = globalvars(fn, recurse=True, builtin=False)
    except Exception:
        referenced = {}
    for name in sorted(referenced):
        yield f"global {name!r}", referenced[name]
    positional = code.co_varnames[: code.co_argcount]
    defaults = fn.__defaults__ or ()
    for name, value in zip(positional[len(positional) - len(defaults) :], defaults, strict=False):
        yield f"default {name!r}", value
    for name, value in sorted((fn.__kwdefaults__ or {}).items()):
        yield f"default {name!r}", value
    for name, value in sorted(fn.__dict__.items()):
        yield f".{name}", value


def _code_children(code: types.CodeType) -> Iterator[tuple[str, Any]]:
    yield "bytecode", code.co_code
    for i, const in enumerate(code.co_consts):
        if isinstance(const, types.CodeType):
            yield f"const[{i}] {const.co_name}", const
        else:
            yield f"const[{i}]", const
    yield "names", code.co_names
    yield "varnames", code.co_varnames
    yield "linetable", code.co_linetable
    yield "filename", pickled_filename(code)


def _class_children(cls: type) -> Iterator[tuple[str, Any]]:
    for i, base in enumerate(cls.__bases__):
        if base is not object:
            yield f"base[{i}]", base
    skip = {"__dict__", "__weakref__", "__module__", "__qualname__", "__doc__"}
    for name in sorted(cls.__dict__):
        if name not in skip:
            yield f".{name}", cls.__dict__[name]


def _object_children(obj: Any, max_items: int) -> Iterator[tuple[str, Any]]:
    try:
        reduced = obj.__reduce_ex__(4)
    except Exception:
        # Cannot be reduced (the unpicklable piece, or a part of it): its __dict__ can still show
        # which attribute is the problem.
        state = getattr(obj, "__dict__", None)
        if isinstance(state, dict):
            for key in sorted(state, key=str):
                yield f".{key}", state[key]
        return
    if isinstance(reduced, str) or not isinstance(reduced, tuple):
        return
    ctor = reduced[0]
    args = reduced[1] if len(reduced) > 1 else ()
    state = reduced[2] if len(reduced) > 2 else None
    listitems = reduced[3] if len(reduced) > 3 else None
    dictitems = reduced[4] if len(reduced) > 4 else None
    if getattr(ctor, "__name__", "") == "__newobj__" and args:
        cls, args = args[0], args[1:]
        if isinstance(cls, type) and not _by_reference(cls):
            yield "class", cls
    elif getattr(ctor, "__name__", "") == "_reconstructor" and args:
        cls = args[0]
        if isinstance(cls, type) and not _by_reference(cls):
            yield "class", cls
        args = ()
    for i, arg in enumerate(args or ()):
        yield f"args[{i}]", arg
    slots = None
    if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or isinstance(state[0], dict)):
        state, slots = state
    if isinstance(state, dict):
        yield from _items([(f".{k}", state[k]) for k in sorted(state, key=str)], max_items)
    elif state is not None:
        yield "state", state
    if isinstance(slots, dict):
        yield from _items([(f".{k}", slots[k]) for k in sorted(slots, key=str)], max_items)
    if listitems is not None:
        yield from _items([(f"[{i}]", v) for i, v in enumerate(listitems)], max_items)
    if dictitems is not None:
        yield from _items([(_key_label(k), v) for k, v in dictitems], max_items)
