"""Deterministic hashing the way `datasets` does it (dill + xxhash) and hash trees.

`hash_object(obj)` equals `datasets`' `Hasher.hash(obj)`; `build_tree(obj)` is the hash tree of an
object (what each part contributes); `diff_trees(argument, trees)` names the part that differs
between runs. Names load when first used: importing this package imports neither dill nor xxhash.

May import only the base modules (`errors`, `formatting`, `safejson`, `processes`,
`annotations`, `hints`).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "hash_object": "cachetool.fingerprint.hashing",
    "build_tree": "cachetool.fingerprint.tree",
    "diff_trees": "cachetool.fingerprint.diff",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cachetool.fingerprint' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
