"""Compare hash trees from several processes and name the culprit.

The culprit is the deepest node on which all differences lie (the longest common path of the
differing leaves), found from the digests only, never a type or a name; its *hint* says what
usually causes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from cachetool.fingerprint.hints import ADDED_HINT, HASH_SEED_HINT, hint_for
from cachetool.fingerprint.tree import HashNode, node_at


@dataclass(frozen=True)
class _Part:
    """A part of a hashed argument: where it sits and what it is."""

    argument: str
    #: Access steps below the argument, e.g. ``("closure 'stop'",)``; empty: the argument itself.
    path: tuple[str, ...]
    type: str
    #: A few words, e.g. ``frozenset of 12 str``.
    description: str

    @property
    def path_str(self) -> str:
        """``function → closure 'stop' (frozenset of 12 str)``."""
        return f"{render_path(self.argument, self.path)} ({self.description})"

    def to_dict(self) -> dict[str, Any]:
        """Every field (tuples as lists), with `path_str` after `path`."""
        doc: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            doc[f.name] = list(value) if isinstance(value, tuple) else value
            if f.name == "path":
                doc["path_str"] = self.path_str
        return doc


@dataclass(frozen=True)
class Culprit(_Part):
    """The deepest part of an argument on which every difference between the runs lies."""

    #: One short repr per run.
    reprs: tuple[str, ...]
    #: One digest per run (None where the part could not be pickled).
    digests: tuple[str | None, ...]
    #: What kind of difference this is: ``set-order``, ``order``, ``timestamp``, ``uuid``,
    #: ``temp-path``, ``address``, ``code``, ``source-file``, ``lines``, ``random-state``,
    #: ``cache-state``, ``value``.
    kind: str
    hint: str
    #: When the differences sit in several places, each of them (paths below the argument).
    leaves: tuple[tuple[str, ...], ...] = field(default_factory=tuple)
    #: When the differences sit in several places, a culprit for each (the first few).
    parts: tuple[Culprit, ...] = field(default_factory=tuple)

    @property
    def values_str(self) -> str:
        """``4187 vs 912``: the reprs of the runs, distinct ones only, in run order."""
        return " vs ".join(dict.fromkeys(self.reprs))

    @property
    def leaves_str(self) -> list[str]:
        """Each differing part, when there are several, as a rendered path."""
        return [render_path(self.argument, leaf) for leaf in self.leaves]

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "leaves": self.leaves_str, "parts": [p.to_dict() for p in self.parts]}


@dataclass(frozen=True)
class Unpicklable(_Part):
    """The smallest part of an argument that cannot be pickled, with the real exception text."""

    repr: str
    error: str

    @property
    def hint(self) -> str:
        return (
            f"{self.description} cannot be pickled ({self.error}), so datasets uses a random "
            "fingerprint and never reuses the cache: create it inside the function (or make it "
            "picklable), or pass new_fingerprint= to the transform."
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "hint": self.hint}


def _named(node: HashNode) -> tuple[str, str]:
    """The `type` and `description` of the part at `node`."""
    return str(node.get("t", "?")), str(node.get("s") or node.get("t", "?"))


def seeded(culprit: Culprit) -> Culprit:
    """`culprit` once an equal hash seed reproduced it: a plain value (kind ``value``, "different in
    each run") follows the hash seed instead (kind ``hash-seed``), in each of its parts too."""
    parts = tuple(seeded(p) for p in culprit.parts)
    if culprit.kind == "value":
        return replace(culprit, kind="hash-seed", hint=HASH_SEED_HINT, parts=parts)
    return replace(culprit, parts=parts)


def render_path(argument: str, path: Sequence[str]) -> str:
    """``fn_kwargs['seed']``, ``function → __self__ → .label2id``: subscripts attach to the step
    before them, other steps are joined with arrows."""
    out = argument
    for step in path:
        if step.startswith("[") and out:
            out += step
        else:
            out = f"{out} → {step}" if out else step
    return out


def diff_trees(argument: str, trees: Sequence[HashNode | None]) -> Culprit | None:
    """The culprit among N trees of one argument (one tree per run), or None when all agree.

    A tree missing in a run (None) makes the argument itself the culprit.
    """
    if len(trees) < 2:
        return None
    if any(t is None for t in trees):
        present = [t for t in trees if t is not None]
        base = present[0] if present else {}
        return _culprit(argument, (), [t or base for t in trees], ())
    nodes = [t for t in trees if t is not None]
    if _same(nodes):
        return None
    leaves: list[tuple[str, ...]] = []
    _collect(nodes, (), leaves)
    if not leaves:
        return None
    common = _common_prefix(leaves)
    found = [node_at(t, common) for t in nodes]
    culprit_nodes = [f for f in found if f is not None] or nodes
    culprit = _culprit(argument, common, culprit_nodes, tuple(leaves))
    if culprit.kind == "value" and common:
        culprit = _as_path(culprit, [node_at(t, common[:-1]) for t in nodes])
    # The differences sit in several places below a node that is not itself the problem (a
    # function, an object): name each place. A dict or list reordered as a whole is one problem.
    if (len(leaves) > 1 and hint_for(culprit_nodes, common)[0] == "value") or (
        len(leaves) == 1 and any(node_at(t, leaves[0]) is None for t in nodes)
    ):
        places = _places(nodes, common, leaves)
        parts = []
        for place in places[:_MAX_PARTS]:
            found_nodes = [node_at(t, place) for t in nodes]
            place_nodes = [n for n in found_nodes if n is not None]
            if len(place_nodes) == len(nodes):
                parts.append(_culprit(argument, place, place_nodes, ()))
            elif place_nodes:
                parts.append(_added(argument, place, found_nodes))
        culprit = replace(culprit, parts=tuple(parts), leaves=tuple(places))
    return culprit


def _as_path(culprit: Culprit, parents: Sequence[HashNode | None]) -> Culprit:
    """A part of a `pathlib` path (``.scratch → args[2]``) read as the whole path in each run
    (``.scratch``), so a folder made by `tempfile.mkdtemp` is a temporary path, not just a value."""
    found = [p for p in parents if p is not None and str(p.get("t", "")).endswith("Path")]
    if len(found) != len(parents):
        return culprit
    texts = ["/".join(str(c.get("r", "")).strip("'\"") for c in p.get("c", ())) for p in found]
    kind, hint = hint_for([{"t": "str", "r": text} for text in texts])
    if kind == "value":
        return culprit
    whole = _culprit(culprit.argument, culprit.path[:-1], found, ())
    return replace(whole, kind=kind, hint=hint)


#: What a part missing in a run reads as.
ABSENT = "(absent)"


def _added(argument: str, path: tuple[str, ...], nodes: Sequence[HashNode | None]) -> Culprit:
    """A part present in some runs only: a value set on first use, or added."""
    first = next(n for n in nodes if n is not None)
    return Culprit(
        argument,
        path,
        *_named(first),
        reprs=tuple(ABSENT if n is None else str(n.get("r", "")) for n in nodes),
        digests=tuple(None if n is None else n.get("d") for n in nodes),
        kind="added",
        hint=ADDED_HINT,
    )


def _places(
    trees: Sequence[HashNode], common: tuple[str, ...], leaves: Sequence[tuple[str, ...]]
) -> list[tuple[str, ...]]:
    """Group differing leaves under their shallowest ancestor that explains itself (a reordered
    list or dict, a frozenset, a timestamp ...): one place per thing to fix."""
    places: list[tuple[str, ...]] = []
    for leaf in leaves:
        place = leaf
        for depth in range(len(common) + 1, len(leaf)):
            prefix = leaf[:depth]
            found = [n for n in (node_at(t, prefix) for t in trees) if n is not None]
            # A function's code is no explanation of its own: what in it differs is (a constant,
            # its bytecode, its lines).
            if len(found) == len(trees) and hint_for(found, prefix)[0] not in ("value", "code"):
                place = prefix
                break
        if place not in places:
            places.append(place)
    return places


_MAX_PARTS = 6


def _same(nodes: Sequence[HashNode]) -> bool:
    digests = {n.get("d") for n in nodes}
    if len(digests) == 1 and None not in digests:
        return True
    if None in digests:
        # Unpicklable in every run: not a difference between runs (the random fallback is reported
        # separately); a part that pickles in one run and not in another is.
        return all(n.get("d") is None for n in nodes) and len({n.get("e") for n in nodes}) == 1
    return False


def _collect(nodes: Sequence[HashNode], path: tuple[str, ...], out: list[tuple[str, ...]]) -> None:
    """The differing leaves below `path`: children that differ are descended; a child present in
    some runs only (an attribute a `functools.cached_property` or a lazy memo set on first use, a
    key added to a dict, the node's type being the same in every run) is a leaf of its own. The
    same children in another order (a dict built by iterating a set) leave the node itself as the
    leaf: its order is the difference."""
    children = [{c["l"]: c for c in n.get("c", ())} for n in nodes]
    labels = [tuple(c) for c in children]
    differing: list[tuple[str, ...]] = []
    if all(set(lab) == set(labels[0]) for lab in labels) and any(lab != labels[0] for lab in labels):
        out.append(path)
        return
    everywhere = [label for label in labels[0] if all(label in c for c in children)]
    for label in everywhere:
        if not _same([c[label] for c in children]):
            differing.append((*path, label))
    somewhere = [label for lab in labels for label in lab if not all(label in c for c in children)]
    if somewhere and len({n.get("t") for n in nodes}) > 1:
        out.append(path)  # another type in another run (None, then a dict): the node is the leaf
        return
    if not differing and not somewhere:
        out.append(path)
        return
    for leaf in differing:
        _collect([c[leaf[-1]] for c in children], leaf, out)
    for label in dict.fromkeys(somewhere):
        out.append((*path, label))


def _common_prefix(paths: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    first = paths[0]
    n = len(first)
    for p in paths[1:]:
        n = min(n, len(p))
        for i in range(n):
            if p[i] != first[i]:
                n = i
                break
    return first[:n]


def _culprit(
    argument: str, path: tuple[str, ...], nodes: Sequence[HashNode], leaves: tuple[tuple[str, ...], ...]
) -> Culprit:
    first = nodes[0]
    kind, hint = hint_for(nodes, path, argument)
    if kind == "value" and len(leaves) > 1:
        # Several differing parts below: when they are all of one kind, that kind explains the culprit.
        hints: dict[str, str] = {}
        for leaf in leaves:
            leaf_nodes = [n for n in (node_at(t, leaf[len(path) :]) for t in nodes) if n is not None]
            leaf_kind, leaf_hint = (
                hint_for(leaf_nodes, leaf, argument) if len(leaf_nodes) == len(nodes) else ("", "")
            )
            hints.setdefault(leaf_kind, leaf_hint)
        if len(hints) == 1 and "" not in hints:
            kind, hint = next(iter(hints.items()))
    return Culprit(
        argument,
        path,
        *_named(first),
        reprs=tuple(str(n.get("r", "")) for n in nodes),
        digests=tuple(n.get("d") for n in nodes),
        kind=kind,
        hint=hint,
        leaves=leaves if len(leaves) > 1 else (),
    )


def find_unpicklable_in_tree(argument: str, tree: HashNode, error: str | None = None) -> Unpicklable | None:
    """The deepest node that cannot be pickled while all of its children can, or None when the whole
    argument pickles. Where several parts fail, the one the exception names is followed (`error`,
    the text datasets swallowed, else the argument's own): `cannot pickle '_queue.SimpleQueue'
    object` leads to a pool's `._work_queue`, not to its `._threads` (which hold that queue) nor to
    a part that failed in another way (a RecursionError on some later state)."""
    if tree.get("d") is not None or "e" not in tree:
        return None
    wanted = error or str(tree.get("e", ""))
    path: tuple[str, ...] = ()
    node = tree
    while True:
        failing = [c for c in node.get("c", ()) if c.get("d") is None and "e" in c]
        if not failing:
            break
        node = min(failing, key=lambda c: _blame_order(c, wanted))
        path = (*path, node["l"])
    return Unpicklable(
        argument,
        path,
        *_named(node),
        repr=str(node.get("r", "")),
        error=str(node.get("e", "")),
    )


def _blame_order(node: HashNode, wanted: str) -> tuple[int, int, int]:
    """Sort key among failing parts: the type the exception names first, then the same exception,
    then anything but a RecursionError; ties keep the tree's order (min is stable)."""
    type_name = str(node.get("t", "")).rsplit(".", 1)[-1]
    error = str(node.get("e", ""))
    named = bool(type_name) and bool(re.search(rf"['.]{re.escape(type_name)}'", wanted))
    return (0 if named else 1, 0 if error == wanted else 1, 1 if error.startswith("RecursionError") else 0)


def find_unpicklable(argument: str, obj: Any) -> Unpicklable | None:
    """Decompose `obj` and try to pickle each piece: the smallest piece that fails, with the real
    exception text, or None when `obj` pickles."""
    from cachetool.fingerprint.tree import build_tree

    return find_unpicklable_in_tree(argument, build_tree(obj))
