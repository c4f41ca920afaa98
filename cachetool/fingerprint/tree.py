"""Hash trees: an object decomposed into the parts its fingerprint is made of, each part hashed.

`datasets` hashes an argument as one pickle; a hash tree says which part differed: the root is the
argument (its digest is exactly ``Hasher.hash(value)``), each child a part the pickle contains
(`decompose`), every node hashed on its own as `datasets` hashes a value, so that trees from two
processes compare node by node (`diff`). Bounded in depth and size. A node is a `HashNode`: a small
dict with one-letter keys.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypedDict, cast

from cachetool.fingerprint.decompose import MORE, decomposable, describe, parts_of, short_repr, type_name
from cachetool.fingerprint.hashing import hash_bytes, try_hash


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
    builder = _Builder(max_depth=max_depth, max_nodes=max_nodes, max_items=max_items)
    return builder.node("", obj, depth=0)


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


_SCALAR_TYPES = frozenset({"str", "bytes", "int", "float", "bool", "NoneType", "complex"})


def part_key(label: str, node: HashNode, depth: int) -> tuple[str, ...] | None:
    """How a part is recognised in another tree: an object by its digest, a scalar only as a named
    variable (``global 'n'``) with its digest (an unrelated ``True`` is not it); None otherwise."""
    digest = node.get("d")
    if not isinstance(digest, str):
        return None
    if str(node.get("t", "")) not in _SCALAR_TYPES:
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

    def node(self, label: str, obj: Any, depth: int) -> HashNode:
        self.count += 1
        digest, err = self.digest(obj)
        node: HashNode = {
            "l": label,
            "t": type_name(obj),
            "s": describe(obj),
            "r": short_repr(obj),
            "d": digest,
        }
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
