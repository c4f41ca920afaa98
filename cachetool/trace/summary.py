"""Compact, bounded hash-tree summaries of transform arguments, kept in ledger records.

`cachetool explain` says *what* changed between two runs of a step by diffing the hash trees of
their arguments (`cachetool.fingerprint.diff`). A full tree can be large, so the ledger keeps a
summary: the top levels of the tree (digests, types, short reprs of small leaves), cut to a byte
budget. A 10 MB array in a closure is one leaf with a digest and a few characters of repr.

Summaries are made only where an explanation may be asked for: steps that computed their result
(a cache miss) or that fell back to a random fingerprint. A hit has the fingerprint of an earlier
computation, whose record already holds the summary.
"""

from __future__ import annotations

import json
from typing import Any

#: Levels of the tree kept below the argument.
MAX_DEPTH = 3
#: Nodes built per argument before the byte budget is applied.
MAX_NODES = 80
#: Items of a long container that are looked at.
MAX_ITEMS = 8
#: Bytes of JSON per argument summary; deeper levels are dropped until it fits.
MAX_BYTES = 2500
_REPR = 48
_ERROR = 120
# Parts of a code object a person does not read; their digests still say that they differ.
_NO_REPR = ("bytecode", "linetable", "varnames", "names")


def summarize(value: Any) -> dict[str, Any] | None:
    """A bounded summary of `value`'s hash tree, or None when no tree can be built."""
    try:
        from cachetool.fingerprint.tree import build_tree

        tree = build_tree(value, max_depth=MAX_DEPTH, max_nodes=MAX_NODES, max_items=MAX_ITEMS)
    except Exception:  # a summary is a nicety; never a reason to lose the record
        return None
    node = _compact(dict(tree))
    for keep in range(MAX_DEPTH - 1, -1, -1):
        if len(json.dumps(node, ensure_ascii=False, separators=(",", ":"))) <= MAX_BYTES:
            return node
        node = _cut(node, keep)
    return node  # the argument alone: a digest, a type and a short repr


def _compact(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"l": node.get("l", ""), "t": node.get("t"), "d": node.get("d")}
    desc = node.get("s")
    if isinstance(desc, str) and desc != node.get("t") and len(desc) <= _REPR:
        out["s"] = desc
    r = node.get("r")
    label = str(out["l"])
    if isinstance(r, str) and len(r) <= _REPR and label not in _NO_REPR:
        out["r"] = r
    if "e" in node:
        out["e"] = str(node["e"])[:_ERROR]
    for key in ("o", "x"):
        if key in node:
            out[key] = node[key]
    children = node.get("c")
    if children:
        out["c"] = [_compact(c) for c in children]
    return out


def _cut(node: dict[str, Any], depth: int) -> dict[str, Any]:
    """The same tree without the nodes below `depth` (their parents are marked ``x: "depth"``)."""
    out = dict(node)
    if "c" not in out:
        return out
    if depth <= 0:
        del out["c"]
        out["x"] = "depth"
        return out
    out["c"] = [_cut(c, depth - 1) for c in out["c"]]
    return out
