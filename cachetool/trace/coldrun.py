"""The determinism runner's cold run (`Tracer.recompute`): every step computes, and writes where
a plain run would unless the cache already holds that step. `positions` reads, once per wrapped
method, where it takes `load_from_cache_file` and the file names a script may give;
`recomputed_args` rewrites a call's arguments; `fresh_path` says where a step it computes writes."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

#: The parameters of a transform that name a file of the script's own choosing.
_FILE_NAMES = (
    "cache_file_name",
    "indices_cache_file_name",
    "train_indices_cache_file_name",
    "test_indices_cache_file_name",
)


class Positions(NamedTuple):
    """Where a transform takes `load_from_cache_file` and the file names the script may give."""

    load: int
    names: tuple[tuple[str, int], ...]


def positions(function: Callable[..., Any]) -> Positions | None:
    """`function`'s `load_from_cache_file` and file-name parameters, by position (`sys.maxsize`
    for keyword-only ones), through its decorators; None when it does not take
    `load_from_cache_file`. Read from the code object: `inspect.signature` costs tens of
    microseconds for each of the ~40 methods a tracer wraps, at every start."""
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None:
        return None
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]

    def at(name: str) -> int:
        i = names.index(name)
        return i if i < code.co_argcount else sys.maxsize

    if "load_from_cache_file" not in names:
        return None
    return Positions(at("load_from_cache_file"), tuple((n, at(n)) for n in _FILE_NAMES if n in names))


def with_value(
    args: tuple[Any, ...], kwargs: dict[str, Any], name: str, at: int, value: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with `name` (at position `at`) set to `value`, wherever the caller put it."""
    if len(args) > at:
        return (*args[:at], value, *args[at + 1 :]), kwargs
    return args, {**kwargs, name: value}


def recomputed_args(
    args: tuple[Any, ...], kwargs: dict[str, Any], at: Positions, fresh: Callable[[str, Any], str]
) -> tuple[Any, Any]:
    """The call's arguments for the cold run: `load_from_cache_file=False` wherever the caller
    put it, and each file the script names (`cache_file_name=`, ...) kept if it can be
    written where the script said, else a temporary one (`fresh(path, parent)`, see `fresh_path`)."""
    args, kwargs = with_value(args, kwargs, "load_from_cache_file", at.load, False)
    for name, i in at.names:
        given = args[i] if i < len(args) else kwargs.get(name)
        if isinstance(given, (str, os.PathLike)):
            path = fresh(os.fspath(given), args[0] if args else None)
            if path != os.fspath(given):
                args, kwargs = with_value(args, kwargs, name, i, path)
    return args, kwargs


def fresh_path(path: str, parent: Any = None) -> str:
    """Where the cold run writes a step it computes: where a plain run would, unless the
    cache already holds that step (its file, or the shards of a `num_proc` map), which it
    leaves alone (a reader on another host would lose a file replaced under it) and writes to
    a temporary folder instead, as `datasets` does with caching off. A step named by the
    script whose parent is in that folder goes there too: it was made from a recomputed
    parent, not the one the cache holds. (Without a name, `datasets` puts it beside its
    parent by itself.)"""
    folder, name = os.path.split(path)
    stem = name[: -len(".arrow")] + "_" if name.endswith(".arrow") else None
    fp_mod = sys.modules["datasets.fingerprint"]
    made = getattr(fp_mod, "_TEMP_DIR_FOR_TEMP_CACHE_FILES", None)  # made on first use
    aside = (
        made is not None
        and parent is not None
        and any(os.path.dirname(os.path.abspath(f["filename"])) == made.name for f in parent.cache_files)
    )
    if not (
        aside
        or os.path.lexists(path)
        or (stem and os.path.isdir(folder) and any(n.startswith(stem) for n in os.listdir(folder)))
    ):
        return path
    temp = fp_mod.get_temporary_cache_files_directory()
    return os.path.join(temp, f"cache-{os.urandom(8).hex()}.arrow")
