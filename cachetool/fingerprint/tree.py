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

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import xxhash

from cachetool.fingerprint.decompose import MORE, decomposable, parts_of
from cachetool.fingerprint.describe import describe, short_repr, type_name
from cachetool.fingerprint.hashing import try_hash

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_MAX_NODES",
    "build_tree",
    "describe",
    "iter_nodes",
    "node_at",
    "part_key",
    "short_repr",
]

DEFAULT_MAX_DEPTH = 12
DEFAULT_MAX_NODES = 600
DEFAULT_MAX_ITEMS = 64


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


def node_at(tree: Mapping[str, Any], path: Sequence[str]) -> Mapping[str, Any] | None:
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


_SCALAR_TYPES = frozenset({"str", "bytes", "int", "float", "bool", "NoneType", "complex"})


def part_key(label: str, node: Mapping[str, Any], depth: int) -> tuple[str, ...] | None:
    """How one part of an object is recognised in another tree (the same object hashed by
    another step): an object or container by its digest (distinctive), a scalar only as a named
    variable (``global 'n'``, ``closure 'k'``) with its value's digest, so that an unrelated
    ``True`` or ``None`` elsewhere is not taken for it. None when the part cannot be recognised."""
    digest = node.get("d")
    if not isinstance(digest, str):
        return None
    if str(node.get("t", "")) not in _SCALAR_TYPES:
        return (digest,)
    if depth >= 1 and label.startswith(("global ", "closure ", "[")):
        return (label, digest)
    return None


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
        node: dict[str, Any] = {"l": label, "t": type_name(obj), "s": describe(obj), "r": short_repr(obj)}
        node["d"] = digest
        if err is not None:
            node["e"] = err
        order = _order_free_digest(obj)
        if order is not None:
            node["o"] = order
        parts = list(parts_of(obj, self.max_items)) if decomposable(obj) else []
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
                if child_label is MORE:
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
