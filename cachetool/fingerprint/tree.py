"""Hash trees: an object decomposed into the parts its pickle contains (`parts_of`), each hashed as
`datasets` hashes a value (the root's digest is ``Hasher.hash(value)``), so that trees from two
processes compare node by node. Bounded in depth and size; values of array, table and model
libraries are leaves. A node is a `HashNode`.
"""

from __future__ import annotations

import collections
import datetime
import functools
import itertools
import re
import reprlib
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypedDict, cast

from cachetool.fingerprint.hashing import by_reference, hash_bytes, pickled_filename, try_hash


class HashNode(TypedDict, total=False):
    """One node of a hash tree, as the tracer writes it in an events file or the ledger."""

    l: str  # noqa: E741 - the access step from the parent ("closure 'stop'"; "" at the root)
    t: str  # type name ("frozenset")
    s: str  # what it is, for a person ("frozenset of 12 str")
    r: str  # a short repr, control characters escaped
    d: str | None  # its digest as datasets computes it, None when it cannot be pickled
    e: str  # only when it cannot be pickled: the exception ("TypeError: cannot pickle ...")
    o: str  # only for str/list/tuple/dict: a digest that ignores item order
    x: str  # only when decomposition stopped early: depth, nodes, items, cycle
    c: list[HashNode]  # children, only when there are any


def as_node(tree: Mapping[str, Any]) -> HashNode:
    """A tree read from a record (JSON objects) as the `HashNode` it is."""
    return cast(HashNode, tree)


DEFAULT_MAX_DEPTH = 12
DEFAULT_MAX_NODES = 600
DEFAULT_MAX_ITEMS = 64


def build_tree(
    obj: Any,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_nodes: int = DEFAULT_MAX_NODES,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> HashNode:
    """Decompose `obj` into a hash tree (a JSON-able dict, see the module docstring).

    The root's ``"d"`` equals ``datasets.fingerprint.Hasher.hash(obj)``, or is None (with ``"e"``
    holding the exception text) when `obj` cannot be pickled; the tree then shows which part fails.
    Never raises for an odd object: a part that cannot be inspected becomes a leaf.
    """
    count = 0
    # Digests by object id for this build; the objects are kept alive so ids stay unique.
    digests: dict[int, tuple[Any, str | None, str | None]] = {}
    on_path: set[int] = set()
    # Classes hashed by value (a dataclass's fields, methods and their code) are expanded after
    # every value, with a budget of their own: neither spends the other's (up to 2 * max_nodes).
    budget = max_nodes
    classes: list[tuple[HashNode, Any, int, frozenset[int]]] = []

    def node(label: str, obj: Any, depth: int, expand_class: bool = False) -> HashNode:
        nonlocal count
        count += 1
        known = digests.get(id(obj))
        digest, err = known[1:] if known is not None and known[0] is obj else try_hash(obj)
        digests[id(obj)] = (obj, digest, err)
        out: HashNode = {
            "l": label,
            "t": type_name(obj),
            "s": describe(obj),
            "r": short_repr(obj),
            "d": digest,
        }
        if err is not None:
            out["e"] = err
        order = _order_free_digest(obj)
        if order is not None:
            out["o"] = order
        parts = list(parts_of(obj, max_items)) if decomposable(obj) else []
        if not parts:
            return out
        if isinstance(obj, type) and not expand_class:
            out["x"] = "nodes"  # until its turn comes in `classes`
            classes.append((out, obj, depth, frozenset(on_path)))
            return out
        stop = "cycle" if id(obj) in on_path else "depth" if depth >= max_depth else None
        if stop is not None or count >= budget:
            out["x"] = stop or "nodes"
            return out
        children = []
        on_path.add(id(obj))
        try:
            for child_label, child in parts:
                if child_label is MORE:
                    out["x"] = "items"
                    continue
                if count >= budget:
                    out["x"] = "nodes"
                    break
                children.append(node(child_label, child, depth + 1))
        finally:
            on_path.discard(id(obj))
        if children:
            out["c"] = children
        return out

    root = node("", obj, 0)
    budget = count + max_nodes
    while classes and count < budget:
        placeholder, cls, depth, ancestors = classes.pop(0)
        if id(cls) in ancestors:
            placeholder["x"] = "cycle"
            continue
        count -= 1  # the placeholder was counted; its expansion counts it again
        on_path.clear()
        on_path.update(ancestors)
        expanded = node(placeholder["l"], cls, depth, expand_class=True)
        placeholder.pop("x")
        placeholder.update(expanded)
    return root


def graft(
    obj: Any,
    tree: HashNode,
    wanted: Callable[[Any], bool],
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_visits: int = 300,
    max_paths: int = 4,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> HashNode:
    """`tree` (a bounded tree of `obj`) with, below each node it stops at for depth, the path to each
    part that is `wanted` (one that varies between processes by itself, however deep it sits), so
    that a diff of two such trees reaches that part. Parts are looked at (never hashed) up to
    `max_depth` levels below the root and `max_visits` in all, each node the tree stops at its share
    of them (the methods of a script's class, walked first, left none for `self`'s attributes);
    only the nodes on a path are hashed."""
    stops = sum(1 for _, n in iter_nodes(tree) if n.get("x") == "depth" and not n.get("c"))
    share = max(max_visits // max(stops, 1), 16)
    visits = 0
    limit = 0
    paths = 0

    def found_below(value: Any, depth: int) -> list[HashNode]:
        """Nodes of the parts of `value` that lead to wanted parts (each with its path below it),
        looked for breadth first: an attribute before the insides of the object's class."""
        nonlocal visits, paths
        out: list[HashNode] = []
        seen = {id(value)}
        queue: collections.deque[tuple[Any, int, tuple[tuple[str, Any], ...]]] = collections.deque()
        queue.append((value, depth, ()))
        while queue:
            current, level, path = queue.popleft()
            if level >= max_depth or not decomposable(current):
                continue
            for label, part in parts_of(current, max_items):
                if label is MORE or visits >= min(limit, max_visits) or paths >= max_paths:
                    break
                visits += 1
                if wanted(part):
                    paths += 1
                    _insert(out, (*path, (label, part)))
                elif id(part) not in seen:
                    seen.add(id(part))
                    queue.append((part, level + 1, (*path, (label, part))))
        return out

    def walk(node: HashNode, value: Any, depth: int) -> HashNode:
        nonlocal limit
        if node.get("x") == "depth" and not node.get("c"):
            limit = visits + share
            below = found_below(value, depth)
            return {**node, "c": below} if below else node
        children = node.get("c")
        if not children:
            return node
        parts = dict(parts_of(value, max_items))
        return {**node, "c": [walk(c, parts[c["l"]], depth + 1) if c["l"] in parts else c for c in children]}

    return walk(tree, obj, 0)


def _insert(nodes: list[HashNode], path: Sequence[tuple[str, Any]]) -> None:
    """Add the nodes of `path` (labels and parts, the last one wanted) to the tree `nodes`."""
    (label, part), rest = path[0], path[1:]
    node = next((n for n in nodes if n["l"] == label), None)
    if node is None:
        node = _alone(label, part)
        nodes.append(node)
    if rest:
        _insert(node.setdefault("c", []), rest)


def _alone(label: str, obj: Any) -> HashNode:
    """The node of `obj` without its children (marked as stopped for depth where it has parts)."""
    node = build_tree(obj, max_depth=0)
    node["l"] = label
    return node


def iter_nodes(tree: HashNode, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], HashNode]]:
    """Every ``(path, node)`` of a tree, depth first; `path` is the labels below the root."""
    yield path, tree
    for child in tree.get("c", ()):
        yield from iter_nodes(child, (*path, child.get("l", "")))


def node_at(tree: HashNode, path: Sequence[str]) -> HashNode | None:
    """The node at `path` (labels below the root), or None."""
    node = tree
    for label in path:
        for child in node.get("c", ()):
            if child.get("l") == label:
                node = child
                break
        else:
            return None
    return node


SCALAR_TYPES = frozenset({"str", "bytes", "int", "float", "bool", "NoneType", "complex"})


def part_key(label: str, node: HashNode, depth: int) -> tuple[str, ...] | None:
    """How a part is recognised in another tree: an object by its digest, a scalar only as a named
    variable (``global 'n'``) with its digest (an unrelated ``True`` is not it); None otherwise."""
    digest = node.get("d")
    if not isinstance(digest, str):
        return None
    if str(node.get("t", "")) not in SCALAR_TYPES:
        return (digest,)
    if depth >= 1 and label.startswith(("global ", "closure ", "[")):
        return (label, digest)
    return None


def part_keys(tree: HashNode) -> set[tuple[str, ...]]:
    """The `part_key` of every recognisable part of a tree."""
    keys = {part_key(path[-1] if path else "", node, len(path)) for path, node in iter_nodes(tree)}
    return {k for k in keys if k is not None}


def types_on_path(tree: HashNode, path: Sequence[str]) -> str:
    """The type names of the nodes from the root down to `path` (what a hint reads the kind of
    object from: a tokenizer, a model)."""
    nodes = (node_at(tree, path[:depth]) for depth in range(len(path) + 1))
    return " ".join(n.get("t", "") for n in nodes if n is not None)


def _order_free_digest(obj: Any) -> str | None:
    """A digest that is the same for the same items in any order, to recognise "built by iterating a
    set": a string with the same characters, a list, tuple or dict with the same items or values."""
    try:
        if isinstance(obj, str):
            if not 2 <= len(obj) <= 100_000:
                return None
            return hash_bytes("".join(sorted(obj)).encode("utf-8", "surrogatepass"))
        if isinstance(obj, (list, tuple)):
            values = list(obj)
        elif isinstance(obj, dict):
            values = list(obj.values())
        else:
            return None
        if len(values) < 2 or len(values) > 10_000:
            return None
        keys = sorted(repr(v) for v in values)
        return hash_bytes("\x00".join(keys).encode("utf-8", "surrogatepass"))
    except Exception:
        return None


# -- the parts of an object ----------------------------------------------------------------------

_REPR_LIMIT = 100

# Values of these libraries are leaves (kept whole) and their type names keep the
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
    # `random.Random` pickles its whole Mersenne Twister state: 625 ints no person reads.
    "random",
)

_repr = reprlib.Repr()
vars(_repr).update(
    maxstring=60, maxother=60, maxlist=6, maxtuple=6, maxset=6, maxfrozenset=6, maxdict=4, maxlevel=2
)


def type_name(obj: Any) -> str:
    cls = type(obj)
    module = getattr(cls, "__module__", "") or ""
    name = getattr(cls, "__qualname__", cls.__name__)
    if module in ("builtins", "__main__") or module.startswith("_"):
        return str(name)
    top = module.split(".")[0]
    return f"{top}.{name}" if top in LEAF_MODULES or top == "datasets" else str(name)


def describe(obj: Any) -> str:
    """A few words for a person: ``frozenset of 12 str``, ``function 'clean'``, ``code 'f'``."""
    try:
        if isinstance(obj, (set, frozenset, list, tuple)):
            names = {type(x).__name__ for x in itertools.islice(obj, 200)}  # one type: named
            return f"{type_name(obj)} of {len(obj)}" + (f" {names.pop()}" if len(names) == 1 else "")
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

MORE: Any = object()  # a marker label: more items than shown


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


def _object_items(obj: Any) -> list[tuple[str, Any]] | None:
    """``[(label, item)]`` of a small numpy array of Python objects (``[0]``, or ``[1, 2]`` in
    two dimensions), which pickles each item as `datasets` pickles it (a frozenset in hash-seed
    order); None for anything else (an array of numbers is a leaf)."""
    cls = type(obj)
    if cls.__name__ != "ndarray" or not (getattr(cls, "__module__", "") or "").startswith("numpy"):
        return None
    try:
        if obj.dtype.kind != "O" or obj.size > _MAX_CELLS:
            return None
        import numpy as np

        return [(f"[{', '.join(map(str, i))}]", obj[i]) for i in np.ndindex(obj.shape)]
    except Exception:
        return None


def pickled_with_contents(module: types.ModuleType) -> bool:
    """Whether dill (and so `datasets`) pickles this module with all it holds: a module of the
    user's (not of Python or an installed package), whose values then change the fingerprint."""
    try:
        from dill._dill import _is_builtin_module

        return module.__name__ not in ("builtins", "dill", "dill._dill") and not _is_builtin_module(module)
    except Exception:
        return False


def decomposable(obj: Any) -> bool:
    if isinstance(obj, types.ModuleType):
        return pickled_with_contents(obj)
    if isinstance(obj, (_SCALARS, set, frozenset, _TIMES)):
        return False
    if any(read(obj) is not None for read in (_tokenizer_state, _pandas_columns, _object_items)):
        return True
    full_module = getattr(type(obj), "__module__", "") or ""
    if full_module.split(".")[0] in LEAF_MODULES or full_module.startswith(_DATASETS_DATA_MODULES):
        return False
    if isinstance(obj, (types.FunctionType, type)):
        return not by_reference(obj)
    return not isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType))


def parts_of(obj: Any, max_items: int) -> Iterator[tuple[str, Any]]:
    """The parts of `obj` as ``(label, value)``; labels are the access steps shown in a path."""
    try:
        yield from _children_unsafe(obj, max_items)
    except Exception:
        return


def _items(seq: list[tuple[str, Any]], max_items: int) -> Iterator[tuple[str, Any]]:
    yield from seq[:max_items]
    if len(seq) > max_items:
        yield MORE, None


def _key_label(key: Any) -> str:
    return f"[{short_repr(key)}]"


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
    elif isinstance(obj, types.ModuleType):  # as dill pickles it: its namespace, less two names
        names = sorted(set(vars(obj)) - {"__builtins__", "__loader__"})
        yield from _items([(f".{name}", vars(obj)[name]) for name in names], max_items)
    elif (state := _tokenizer_state(obj)) is not None:
        for key, value in state.items():
            yield f".{key}", value
    elif (columns := _pandas_columns(obj)) is not None:
        yield from _items(columns, max_items)
    elif (items := _object_items(obj)) is not None:
        yield from _items(items, max_items)
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
    how = getattr(ctor, "__name__", "")
    if how in ("__newobj__", "_reconstructor") and args:
        cls, args = args[0], args[1:] if how == "__newobj__" else ()
        if isinstance(cls, type) and not by_reference(cls):
            yield "class", cls
    for i, arg in enumerate(args or ()):
        yield f"args[{i}]", arg
    slots = None
    # Pickle's (dict, slots) pair; any other tuple (a __getstate__ returning a pair) is a state.
    if isinstance(state, tuple) and len(state) == 2 and all(p is None or isinstance(p, dict) for p in state):
        state, slots = state
    if state is not None and not isinstance(state, dict):
        yield "state", state
    for attributes in (state, slots):
        if isinstance(attributes, dict):
            yield from _items([(f".{k}", attributes[k]) for k in sorted(attributes, key=str)], max_items)
    if listitems is not None:
        yield from _items([(f"[{i}]", v) for i, v in enumerate(listitems)], max_items)
    if dictitems is not None:
        yield from _items([(_key_label(k), v) for k, v in dictitems], max_items)
