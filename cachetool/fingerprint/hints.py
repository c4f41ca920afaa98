"""What usually causes a culprit of each kind, and how to fix it: the hint `diff_trees` attaches.

The kind comes from the culprit's nodes (type, place in a function, reprs in each run), never from
a message: a frozenset is "set-order", a function's line table "lines", a float that reads as a
time "timestamp", anything else "value".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cachetool.fingerprint.tree import HashNode


_RUNTIME = (
    "compute it inside the function, or pass it in as an argument that is the same in every run "
    "(e.g. from the command line)."
)
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)
_ADDRESS = re.compile(r"0x[0-9a-f]{6,}", re.I)
_TEMP = re.compile(r"(/tmp/|/var/folders/|\\Temp\\|tmp[a-z0-9_]{8})", re.I)
_DATETIME = re.compile(r"\d{4}-\d\d-\d\d[ T_]\d\d[:\-]?\d\d|\b1[5-9]\d{8}(\.\d+)?\b|\b\d\d:\d\d:\d\d\b")


def hint_for(nodes: Sequence[HashNode], path: Sequence[str] = (), argument: str = "") -> tuple[str, str]:
    """``(kind, one-line hint)`` for a culprit, from its nodes in each run (type, reprs, digests);
    `argument` is the hashed argument it sits in (a generator given to `shuffle` is not one given
    to the mapped function)."""
    type_name = str(nodes[0].get("t", ""))
    reprs = [str(n.get("r", "")) for n in nodes]
    last = path[-1] if path else ""
    orders = {n.get("o") for n in nodes}
    same_items = len(orders) == 1 and None not in orders
    return (
        _order_hint(type_name, last, same_items)
        or _state_hint(type_name, argument)
        or _code_hint(type_name, last, reprs)
        or _value_hint(type_name, reprs)
    )


def _order_hint(type_name: str, last: str, same_items: bool) -> tuple[str, str] | None:
    """A set pickled in hash-seed order, or the same items in another order in each run."""
    if type_name == "frozenset":
        if last.startswith("const["):
            return "set-order", (
                "a set literal of constants in a function (`x in {'a', 'b'}`) compiles to a frozenset "
                "constant whose order follows PYTHONHASHSEED: use a tuple, or a module-level set "
                "(datasets sorts sets)."
            )
        return "set-order", (
            "a frozenset pickles in PYTHONHASHSEED order: use a set (datasets sorts sets) or a sorted tuple."
        )
    if same_items and type_name in ("str", "list", "tuple", "dict"):
        return "order", (
            f"the same items in a different order in each run: this {type_name} is built by iterating "
            "a set or frozenset; iterate sorted(...) instead."
        )
    return None


def _state_hint(type_name: str, argument: str) -> tuple[str, str] | None:
    """An object whose type says it is made at run time: a random generator, a timestamp."""
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
    if _ADDRESS.search(joined):
        return "address", f"a repr with a memory address (id()-based) differs in every run: {_RUNTIME}"
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

#: A part present in some runs only (culprit kind ``added``).
ADDED_HINT = (
    "this part exists in some runs only: an attribute or key set on first use (a "
    "functools.cached_property, a lazily filled memo or vocabulary) is pickled once it is set; "
    "compute it up front (before the first map), or keep it out of the pickle (__getstate__)."
)

#: What to do about a source's inputs given in another order in each run, by what is reordered:
#: the keys of check-determinism's `SourceDiff`s that say so (explain words the same).
ORDER_HINTS = {
    "data_files order": "the data files are listed in another order in each run (a list built from a "
    "set, or os.listdir/glob unsorted): pass data_files=sorted(...).",
    "inputs order": "the datasets are concatenated in another order in each run (a loop over a set or "
    "dict built from one): loop over sorted(...).",
}


def reordered(lists: Sequence[Sequence[str]]) -> bool:
    """The same two or more items in another order in some of `lists` (one list per run)."""
    return (
        len(lists[0]) > 1
        and len({tuple(x) for x in lists}) > 1
        and len({tuple(sorted(x)) for x in lists}) == 1
    )


#: The datasets issue where changing an object inside the mapped function is discussed.
STATE_CHANGE_ISSUE = "https://github.com/huggingface/datasets/issues/3638"


def state_change_hint(types: str) -> str:
    """What to do about an object a step changes while it runs (the hint of a cache-state culprit);
    `types` names the types on the way to the changed part."""
    what = "the tokenizer" if "tokenizer" in types.lower() else "the object"
    return (
        f"the mapped function changes {what} while it runs, and datasets hashes it again later: build "
        f"and configure {what} completely before the first map (truncation, padding, added tokens, a "
        f"lazily built vocabulary, a functools.cached_property: call it once up front), or create it "
        f"inside the function. See "
        f"{STATE_CHANGE_ISSUE}"
    )


def _looks_like_time(text: str) -> bool:
    try:
        return 1e9 < float(text) < 1e10
    except ValueError:
        return False
