"""Paths of the files a listing finds, made cheaply: `child_maker(folder)` gives a function from a
file's name to its `Path`.

A `Path` made the ordinary way parses its text and keeps it twice (the text and its parts): some
400 bytes and a few microseconds per file. Where `pathlib` keeps its parts in a list (Python 3.10
and 3.11 on POSIX), a child is a `PosixPath` holding its folder's path and its name, making its
text and parts when asked. It is equal to, hashes, sorts, prints and pickles as `Path(text)`, and
paths derived from it are ordinary ones. Elsewhere children are ordinary `Path`s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path, PosixPath, PurePath
from typing import Any

#: Whether `pathlib` is the one `_ChildPath` is written for (its parts in a `_parts` slot).
LAZY = (
    os.name == "posix"
    and sys.version_info < (3, 12)
    and "_parts" in getattr(PurePath, "__slots__", ())
    and hasattr(PurePath, "_from_parsed_parts")
)


class _ChildPath(PosixPath):
    """The path of `name` in the folder `_folder`, its text and parts made when asked."""

    __slots__ = ("_folder", "_name", "_prefix")
    _folder: PosixPath
    _name: str
    _prefix: str  # the folder's text and a separator, shared by its children

    @property
    def _parts(self) -> list[str]:  # what pathlib reads to compare, hash and derive paths
        return [*self._folder._parts, self._name]  # type: ignore[attr-defined]

    def __str__(self) -> str:
        return self._prefix + self._name

    def __fspath__(self) -> str:
        return self._prefix + self._name

    def __repr__(self) -> str:
        return f"PosixPath({self._prefix + self._name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PosixPath, (self._prefix + self._name,))

    @property
    def name(self) -> str:
        return self._name

    @property
    def parent(self) -> PosixPath:  # type: ignore[override]
        return self._folder

    # Paths derived from a child are ordinary paths.
    @classmethod
    def _from_parts(cls, args: Any) -> Any:
        return PosixPath._from_parts(args)  # type: ignore[attr-defined]

    @classmethod
    def _from_parsed_parts(cls, drv: str, root: str, parts: list[str]) -> Any:
        return PosixPath._from_parsed_parts(drv, root, parts)  # type: ignore[attr-defined]


def child_maker(folder: Path) -> Callable[[str], Path]:
    """The function from a name to the path of that name in `folder` (an absolute path)."""
    prefix = os.path.join(str(folder), "")
    if LAZY and type(folder) is _ChildPath:  # a folder found by the walk: parsed once, here
        folder = PosixPath._from_parsed_parts(folder.drive, folder.root, folder._parts)  # type: ignore[attr-defined]
    if not (LAZY and type(folder) is PosixPath and folder.is_absolute()):
        return lambda name: Path(prefix + name)
    new = object.__new__
    cls = _ChildPath
    set_folder = _ChildPath.__dict__["_folder"].__set__
    set_name = _ChildPath.__dict__["_name"].__set__
    set_prefix = _ChildPath.__dict__["_prefix"].__set__
    set_drv = PurePath._drv.__set__  # type: ignore[attr-defined]
    set_root = PurePath._root.__set__  # type: ignore[attr-defined]
    drv, root = folder.drive, folder.root

    def child(name: str) -> Path:
        p = new(cls)
        set_folder(p, folder)
        set_name(p, name)
        set_prefix(p, prefix)
        set_drv(p, drv)
        set_root(p, root)
        return p

    return child
