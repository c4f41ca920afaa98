"""Compare hash trees from several processes and name the culprit: the deepest node on which all
differences lie, found from the digests only; its kind and hint come from its nodes (type, place
in a function, reprs in each run), never from a message (`hint_for`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from cachetool.fingerprint.tree import SCALAR_TYPES, HashNode, node_at, short_repr, type_name
from cachetool.safejson import json_fields


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
        return json_fields(self, "argument", "path", "path_str", *(f.name for f in fields(self)[2:]))


@dataclass(frozen=True)
class Culprit(_Part):
    """The deepest part of an argument on which every difference between the runs lies."""

    #: One short repr per run.
    reprs: tuple[str, ...]
    #: One digest per run (None where the part could not be pickled).
    digests: tuple[str | None, ...]
    #: What kind of difference this is: ``set-order``, ``order``, ``timestamp``, ``uuid``,
    #: ``temp-path``, ``address``, ``code``, ``source-file``, ``lines``, ``random-state``,
    #: ``dataset``, ``cache-state``, ``value``.
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
    def text_differs(self) -> bool:
        """Whether the runs' reprs differ beyond memory addresses (an object's default repr)."""
        return len({_ADDRESS.sub("0x", r) for r in self.reprs}) > 1

    def to_dict(self) -> dict[str, Any]:
        """Each of several differing parts (`leaves`) as a rendered path."""
        return {**super().to_dict(), "leaves": [render_path(self.argument, leaf) for leaf in self.leaves]}


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
    each run") follows the hash seed instead (kind ``hash-seed``), in each of its parts too; so
    does text that reads as a uuid (a hex digest of text made by iterating a set: a uuid4 is
    never made again)."""
    parts = tuple(seeded(p) for p in culprit.parts)
    if culprit.kind == "value" and culprit.type == "set":  # datasets sorts sets from 2.15 on
        return replace(culprit, kind="set-order", hint=OLD_SET_HINT, parts=parts)
    if culprit.kind in ("value", "uuid") and culprit.type != "UUID":
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
    leaves = _distinct(nodes, leaves)
    if not leaves:
        return None
    n = 0  # the length of the path all differing leaves share
    while all(len(leaf) > n and leaf[n] == leaves[0][n] for leaf in leaves):
        n += 1
    common = leaves[0][:n]
    found = [node_at(t, common) for t in nodes]
    culprit_nodes = [f for f in found if f is not None] or nodes
    culprit = _culprit(argument, common, culprit_nodes, tuple(leaves))
    if len(leaves) == 1 and str(culprit_nodes[0].get("t", "")) in SCALAR_TYPES:
        # A plain value inside what explains it (the int of a uuid.UUID): named as that.
        place = _places(nodes, (), leaves)[0]
        if place != common:
            culprit = _culprit(argument, place, [n for n in (node_at(t, place) for t in nodes) if n], ())
    if culprit.kind == "value" and common:
        culprit = _as_path(culprit, [node_at(t, common[:-1]) for t in nodes])
    if _items_of_one_container(nodes, common, leaves):
        return culprit  # a list of values drawn at run time (`random.sample`): one thing to fix
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


def _items_of_one_container(
    trees: Sequence[HashNode], common: tuple[str, ...], leaves: Sequence[tuple[str, ...]]
) -> bool:
    """Several items of one list or tuple differ, each a plain value present in every run
    (`random.sample(...)`, numbers drawn at run time): the container is the culprit, not each item."""
    if len(leaves) < 2 or any(len(leaf) != len(common) + 1 for leaf in leaves):
        return False
    containers = [node_at(t, common) for t in trees]
    if any(c is None or c.get("t") not in ("list", "tuple") for c in containers):
        return False
    items = [node_at(t, leaf) for t in trees for leaf in leaves]
    return all(n is not None and str(n.get("t", "")) in SCALAR_TYPES for n in items) and all(
        hint_for([n for n in (node_at(t, leaf) for t in trees) if n is not None])[0] == "value"
        for leaf in leaves
    )


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


def _added(argument: str, path: tuple[str, ...], nodes: Sequence[HashNode | None]) -> Culprit:
    """A part present in some runs only: a value set on first use, or added."""
    first = next(n for n in nodes if n is not None)
    return Culprit(
        argument,
        path,
        *_named(first),
        reprs=tuple("(absent)" if n is None else str(n.get("r", "")) for n in nodes),
        digests=tuple(None if n is None else n.get("d") for n in nodes),
        kind="added",
        hint=ADDED_HINT,
    )


def _distinct(trees: Sequence[HashNode], leaves: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The differing leaves, one object reached by several paths (a function that is a dataclass
    field's default factory and a closure of its ``__init__``: the same type and digest in each
    run) kept once: where another path goes further into it, or else by its path with the fewest
    private names (`ClassLabel.names`, not `._int2str`), then the shortest."""

    def key(path: tuple[str, ...]) -> tuple[Any, ...] | None:
        found = [node_at(t, path) for t in trees]
        if any(n is None or not n.get("d") for n in found):
            return None
        return tuple((n.get("t"), n.get("d")) for n in found if n is not None)

    inside = {key(leaf[:depth]) for leaf in leaves for depth in range(1, len(leaf))} - {None}
    first: dict[Any, tuple[str, ...]] = {}
    for leaf in leaves:
        k = key(leaf)
        if k is None:
            first[leaf] = leaf
        elif k not in inside and (k not in first or _rank(leaf) < _rank(first[k])):
            first[k] = leaf
    kept = set(first.values())
    return [leaf for leaf in leaves if leaf in kept]


def _rank(path: tuple[str, ...]) -> tuple[int, int]:
    """Which of the paths to one object names it best: fewer private names, then fewer steps."""
    return sum(1 for label in path if label.startswith("._")), len(path)


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
    """One digest in every run. Unpicklable in every run, with one error, is no difference between
    runs either (the random fallback is reported separately); pickled in one run only is one."""
    return len({(n.get("d"), n.get("e") if n.get("d") is None else None) for n in nodes}) == 1


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


def find_unpicklable(argument: str, tree: HashNode, error: str | None = None) -> Unpicklable | None:
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


# -- what usually causes a culprit ------------------------------------------------------------

_RUNTIME = (
    "compute it inside the function, or pass it in as an argument that is the same in every run "
    "(e.g. from the command line)."
)
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)
_ADDRESS = re.compile(r"0x[0-9a-f]{6,}", re.I)
_TEMP = re.compile(r"(/tmp/|/var/folders/|\\Temp\\|tmp[a-z0-9_]{8})", re.I)
_DATETIME = re.compile(
    r"\d{4}-\d\d-\d\d[ T_]\d\d[:\-]?\d\d|\b1[5-9]\d{8}(\.\d+)?\b|\b\d\d:\d\d:\d\d\b"
    # time.strftime("%Y%m%d-%H%M%S"), "%Y%m%dT%H%M", ...
    r"|(?<!\d)(19|20)\d\d(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])[T_\-]?([01]\d|2[0-3])[0-5]\d"
)


#: The kinds of part that differ between processes by themselves, whatever the code around them.
VARYING_KINDS = frozenset({"set-order", "timestamp", "uuid", "address", "temp-path", "random-state"})


def varies_by_itself(obj: Any) -> bool:
    """Whether a part, seen in one process, is of a kind that differs between processes by itself: a
    frozenset of str (hash-seed order), a timestamp, a uuid, a temporary path, a memory address, an
    unseeded random generator (`hint_for`'s kinds, read from its type and, for a scalar, its text)."""
    if isinstance(obj, frozenset):
        return len(obj) > 1 and any(isinstance(x, (str, bytes)) for x in obj)
    text = short_repr(obj) if isinstance(obj, (str, int, float)) and not isinstance(obj, bool) else ""
    return hint_for([{"t": type_name(obj), "r": text}] * 2)[0] in VARYING_KINDS


def hint_for(nodes: Sequence[HashNode], path: Sequence[str] = (), argument: str = "") -> tuple[str, str]:
    """``(kind, one-line hint)`` for a culprit, from its nodes in each run (type, reprs, digests);
    `argument` is the hashed argument it sits in (a generator given to `shuffle` is not one given
    to the mapped function)."""
    type_name = str(nodes[0].get("t", ""))
    reprs = [str(n.get("r", "")) for n in nodes]
    last = path[-1] if path else ""
    orders = {n.get("o") for n in nodes}
    same_items = len(orders) == 1 and None not in orders
    frozen_keys = type_name == "dict" and any(
        str(c.get("l", "")).startswith("[frozenset(") for c in nodes[0].get("c", ())
    )
    if type_name == "dict" and not frozen_keys and _keys_reordered_inside(nodes):
        return "order", (
            "a dict keyed by tuples (or strings) built by iterating a set: each key holds the same "
            "items in another order in each run; make the keys from sorted(...) (tuple(sorted(words)))."
        )
    return (
        _order_hint(type_name, last, same_items, frozen_keys)
        or _state_hint(type_name, argument)
        or _code_hint(type_name, last, reprs)
        or _value_hint(type_name, reprs)
    )


def _keys_reordered_inside(nodes: Sequence[HashNode]) -> bool:
    """Dicts whose keys differ between runs, each key of one run the same characters as a key of
    the others (``('cat', 'cats')`` then ``('cats', 'cat')``): keys built by iterating a set."""
    keys = [sorted(str(c.get("l", "")) for c in n.get("c", ())) for n in nodes]
    if not keys[0] or len({tuple(k) for k in keys}) == 1 or any(n.get("x") for n in nodes):
        return False
    return len({tuple(sorted("".join(sorted(k)) for k in ks)) for ks in keys}) == 1


def _order_hint(type_name: str, last: str, same_items: bool, frozen_keys: bool) -> tuple[str, str] | None:
    """A set pickled in hash-seed order (a dict's frozenset keys too), or the same items in another
    order in each run."""
    if type_name == "frozenset":
        if last.startswith("const["):
            return "set-order", (
                "a set literal of constants in a function (`x in {'a', 'b'}`) compiles to a frozenset "
                "constant whose order follows PYTHONHASHSEED: use a tuple, or a module-level set "
                "(with datasets 2.15 or later, which sorts sets)."
            )
        return "set-order", (
            "a frozenset pickles in PYTHONHASHSEED order: use a sorted tuple, or a set (with datasets "
            "2.15 or later, which sorts sets)."
        )
    if frozen_keys:
        return "set-order", (
            "a dict keyed by frozensets: each key pickles in PYTHONHASHSEED order: key it by sorted "
            "tuples (tuple(sorted(words)))."
        )
    if same_items and type_name in ("str", "list", "tuple", "dict"):
        return "order", (
            f"the same items in a different order in each run: this {type_name} is built by iterating "
            "a set or frozenset; iterate sorted(...) instead."
        )
    return None


def _state_hint(type_name: str, argument: str) -> tuple[str, str] | None:
    """An object whose type says it is made at run time: a random generator, a timestamp."""
    if type_name in ("datasets.Dataset", "datasets.DatasetDict"):
        return "dataset", (
            "the function holds a dataset, which datasets hashes with its contents (its table, or its "
            "files and fingerprint): that dataset is made differently in each run (a cause above names "
            "where, if it is one of the script's steps); or give the function the plain values it needs."
        )
    if type_name == "random.Random":
        return "random-state", (
            "an unseeded random.Random() (datasets hashes its state, new in every run): create it with a "
            "fixed seed (random.Random(42)), or inside the function from a seed argument."
        )
    if type_name.split(".")[-1] in ("Generator", "RandomState", "BitGenerator", "PCG64", "MT19937"):
        if argument in ("generator", "seed", ""):
            return "random-state", (
                "an unseeded random generator (shuffle or train_test_split without seed=): pass seed= "
                "or generator=np.random.default_rng(<fixed seed>)."
            )
        return "random-state", (
            "an unseeded random generator reaches the function (np.random.default_rng() or "
            "RandomState() without a seed): datasets hashes its state, new in every run; create it "
            "with a fixed seed (np.random.default_rng(42)), or inside the function from a seed argument."
        )
    if type_name.split(".")[-1] == "UUID":
        return "uuid", f"a uuid is made at run time: {_RUNTIME}"
    if type_name.split(".")[-1] in ("datetime", "date", "time", "Timestamp"):
        return "timestamp", f"a timestamp ({type_name}) is taken at run time: {_RUNTIME}"
    return None


def _code_hint(type_name: str, last: str, reprs: Sequence[str]) -> tuple[str, str] | None:
    """A part of a function's code: its file name, its line table, its bytecode."""
    if last == "filename":
        names = " → ".join(dict.fromkeys(r.strip("'\"") for r in reprs))
        return "source-file", (
            f"the function is the same but its source file changed ({names}), which datasets hashes "
            "(a function's code keeps its file name): run the script under one name, or define the "
            "function in a module both scripts import."
        )
    if last == "linetable":
        return "lines", (
            "the function's code is the same but its lines moved inside it (a blank or comment line "
            "added or removed), which datasets hashes (line numbers from the function's first line)."
        )
    if type_name == "code" or last in ("bytecode", "names", "varnames"):
        return "code", "the function's code differs between runs: is it generated or edited at run time?"
    return None


def _value_hint(type_name: str, reprs: Sequence[str]) -> tuple[str, str]:
    """A value, by what its text looks like (an address, a uuid, a temp path, a time)."""
    # An object's repr is not what gets hashed; only a scalar's text is.
    joined = " ".join(reprs) if type_name in ("str", "bytes", "int", "float") else ""
    if _ADDRESS.search(joined) or (type_name == "int" and all(_looks_like_address(r) for r in reprs)):
        return "address", f"a memory address (an id(), or a repr with 0x...) differs in every run: {_RUNTIME}"
    if _UUID.search(joined):
        return "uuid", f"a uuid is made at run time: {_RUNTIME}"
    if _TEMP.search(joined):
        return "temp-path", f"a temporary path is made at run time: {_RUNTIME}"
    if (type_name == "float" and all(_looks_like_time(r) for r in reprs)) or _DATETIME.search(joined):
        return "timestamp", f"a timestamp is taken at run time: {_RUNTIME}"
    return "value", f"this value is different in each run: {_RUNTIME}"


#: A value that an equal hash seed reproduces (culprit kind ``hash-seed``): not made at run time.
HASH_SEED_HINT = (
    "this value follows PYTHONHASHSEED (a run with an equal hash seed gave the same): it comes from "
    "hash() of a str or bytes, or from iterating a set or frozenset; use a stable hash (hashlib) "
    "or iterate sorted(...) instead."
)

#: A set that an equal hash seed reproduces: only a `datasets` older than 2.15 pickles a set unsorted.
OLD_SET_HINT = (
    "datasets before 2.15 pickles a set in PYTHONHASHSEED order: use a sorted tuple, or datasets 2.15 "
    "or later (which sorts sets)."
)

#: A part present in some runs only (culprit kind ``added``).
ADDED_HINT = (
    "this part exists in some runs only: an attribute or key set on first use (a "
    "functools.cached_property, a lazily filled memo or vocabulary) is pickled once it is set; "
    "compute it up front (before the first map), or keep it out of the pickle (__getstate__)."
)

#: A random fallback drawn from Python's global `random` (datasets < 2.17), and what to do: the
#: tracer's warning, explain and check-determinism say it in these words.
PREDICTABLE_FALLBACK = (
    "the fallback comes from Python's global `random`, so it repeats across runs after random.seed(...)"
)
PREDICTABLE_HINT = (
    "another version of the step loads this result: pass new_fingerprint= (a new one whenever the "
    "step changes), or make the part hashable (create it inside the function)"
)

#: What to do about a source's inputs given in another order in each run, by what is reordered:
#: the keys of check-determinism's `SourceDiff`s that say so (explain words the same).
ORDER_HINTS = {
    "data_files order": "the data files are listed in another order in each run (a list built from a "
    "set, or os.listdir/glob unsorted): pass data_files=sorted(...).",
    "inputs order": "the datasets are concatenated in another order in each run (a loop over a set or "
    "dict built from one): loop over sorted(...).",
    "columns order": "the columns are in another order in each run (rows built as dicts whose keys "
    "come from a set, or columns listed from one): build them in a fixed order (sorted(...)).",
}


def reordered(lists: Sequence[Sequence[str]]) -> bool:
    """The same two or more items in another order in some of `lists` (one list per run)."""
    return (
        len(lists[0]) > 1
        and len({tuple(x) for x in lists}) > 1
        and len({tuple(sorted(x)) for x in lists}) == 1
    )


def state_change_hint(types: str) -> str:
    """What to do about an object a step changes while it runs (the hint of a cache-state culprit);
    `types` names the types on the way to the changed part."""
    what = "the tokenizer" if "tokenizer" in types.lower() else "the object"
    return (
        f"the mapped function changes {what} while it runs, and datasets hashes it again later: build "
        f"and configure {what} completely before the first map (truncation, padding, added tokens, a "
        f"lazily built vocabulary, a functools.cached_property: call it once up front), or create it "
        "inside the function. See https://github.com/huggingface/datasets/issues/3638"
    )


def _looks_like_address(text: str) -> bool:
    """An int that reads as an object's address (``id(obj)`` in CPython): aligned, in user space."""
    try:
        value = int(text)
    except ValueError:
        return False
    return 2**32 <= value < 2**48 and value % 8 == 0


def _looks_like_time(text: str) -> bool:
    try:
        return 1e9 < float(text) < 1e10
    except ValueError:
        return False
