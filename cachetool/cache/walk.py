"""Folders listed for the scan: `os.scandir` and `lstat` (never following a link) into `Item`s.

A child's path (`child_maker`) holds its folder's path and its name and makes its text and parts
when asked (where `pathlib` keeps its parts in a list: Python 3.10 and 3.11 on POSIX): a `Path`
made the ordinary way costs some 400 bytes and a few microseconds per file. It is equal to,
hashes, sorts, prints and pickles as `Path(text)`.
"""

from __future__ import annotations

import gc
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import attrgetter
from pathlib import Path, PosixPath, PurePath
from typing import Any

from cachetool.cache import layout


class Item:
    """One folder entry as `scandir` gave it: its name, path and `lstat` result (`st` None and
    `error` saying why when `lstat` failed). Items live only while their folder is classified.
    `prefix` is the folder's text and a separator, one string shared by its items."""

    __slots__ = ("error", "is_dir", "is_file", "name", "ok", "path", "prefix", "st")

    def __init__(
        self, name: str, path: Path, st: os.stat_result | None, error: str | None, prefix: str
    ) -> None:
        self.name = name
        self.path = path
        self.st = st
        self.error = error
        self.prefix = prefix
        self.ok = st is not None
        mode = 0 if st is None else st.st_mode
        self.is_dir = S_ISDIR(mode)
        self.is_file = S_ISREG(mode)

    @property
    def size(self) -> int:
        return 0 if self.st is None else self.st.st_size


S_ISDIR = stat.S_ISDIR
S_ISREG = stat.S_ISREG


def list_dir(path: Path) -> tuple[list[Item], str | None]:
    """The items of the folder `path` by name (never cachetool's own folder), or why it cannot
    be listed."""
    items: list[Item] = []
    child = child_maker(path)
    prefix = os.path.join(str(path), "")
    own = layout.LEDGER_DIR
    try:
        with os.scandir(path) as it:
            for de in it:
                name = de.name
                if name == own:
                    continue  # cachetool's own state (ledger, pins, leases): never an entry
                try:
                    st = de.stat(follow_symlinks=False)
                except OSError as e:
                    items.append(Item(name, child(name), None, e.strerror or str(e), prefix))
                    continue
                items.append(Item(name, child(name), st, None, prefix))
    except PermissionError:
        return [], "permission denied"
    except OSError as e:
        return [], e.strerror or str(e)
    items.sort(key=attrgetter("name"))  # attrgetter: no Python call per item
    return items, None


@contextmanager
def gc_paused(freeze: bool = False) -> Iterator[None]:
    """No cyclic garbage collection while a listing builds its objects (millions, and no cycles:
    collections took a quarter to a third of the time). With `freeze` (a command about to exit)
    what was made is moved out of the collector's sight on the way out."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        gc.enable()


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
    drv, root = folder.drive, folder.root

    def child(name: str) -> Path:
        # Plain slot stores (specialised by the interpreter): twice as fast as descriptor calls.
        p = new(cls)
        p._folder = folder
        p._name = name
        p._prefix = prefix
        p._drv = drv  # type: ignore[attr-defined]
        p._root = root  # type: ignore[attr-defined]
        return p

    return child
