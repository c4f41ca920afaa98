"""Which cache root's ledger a record belongs to.

A step belongs to the root its result's files live in (the process's cache root, a `cache_dir=`,
a `save_to_disk` folder: a saved `DatasetDict`'s splits belong to its folder). In memory, or on
another file system (`s3://…`): the process's cache root.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["Roots", "abs_path", "cache_files", "local_path", "split_of"]


class Roots:
    """The roots a tracer has met, and the root of each cache folder (remembered per folder).

    `on_new_root(root)` is called once per root met (the tracer holds a lease on it)."""

    def __init__(self, on_new_root: Callable[[str], None]) -> None:
        self.default = ""  # the process's cache root (`HF_DATASETS_CACHE`)
        self._known: set[str] = set()  # cache roots and saved folders met
        self._by_folder: dict[str, str] = {}  # folder -> its root
        self._on_new_root = on_new_root

    def add(self, root: str) -> None:
        if root not in self._known:
            self._known.add(root)
            self._by_folder.clear()
            self._on_new_root(root)

    def remember(self, folder: str, root: str) -> None:
        """`folder` (a builder's output folder, a path or a URL) belongs to the cache root `root`."""
        path = local_path(folder)
        if path is not None:
            self._by_folder[path] = root

    def saved(self, path: str) -> str:
        """A saved dataset is a root of its own; a split of a saved DatasetDict belongs to the dict."""
        parent = os.path.dirname(path)
        root = parent if os.path.isfile(os.path.join(parent, "dataset_dict.json")) else path
        self.add(root)
        return root

    def of(self, ds: Any, files: list[dict[str, Any]] | None = None) -> tuple[str, bool]:
        """(the root whose ledger holds records about `ds`, whether `ds` lives only in memory)."""
        if files is None:
            files = cache_files(ds)
        if not files:
            return self.default, True
        return self.of_folder(os.path.dirname(abs_path(files[0]["filename"]))), False

    def of_folder(self, folder: str) -> str:
        """The root whose ledger holds records about the cache files in `folder`."""
        hit = self._by_folder.get(folder)
        if hit is not None:
            return hit
        if os.path.basename(folder).startswith("hf_datasets-"):
            # disable_caching(): datasets' temp folder, deleted at exit; the step is the cache's.
            self._by_folder[folder] = self.default
            return self.default
        best = ""
        for r in (*self._known, self.default):
            if (folder == r or folder.startswith(r.rstrip(os.sep) + os.sep)) and len(r) > len(best):
                best = r
        if not best:
            # A folder of Arrow files of its own (Dataset.from_file, a custom cache_file_name).
            best = self.saved(folder) if os.path.isfile(os.path.join(folder, "state.json")) else folder
        self._by_folder[folder] = best
        return best


def abs_path(path: str) -> str:
    """`path` made absolute and normal."""
    if path.startswith("/") and "/." not in path and "//" not in path:
        return path  # already absolute and normal: the common case, kept cheap
    return os.path.abspath(os.path.expanduser(path))


_LOCAL_SCHEMES = ("file://", "local://")


def local_path(url: Any) -> str | None:
    """The absolute local path an fsspec-style location names (`/a/b`, `a/b`, `file:///a/b`,
    `file:/a/b`, `local:///a/b`, a path-like); None for any other file system (`s3://…`,
    `memory://…`, a chained `simplecache::file://…`)."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        return None
    for scheme in _LOCAL_SCHEMES:
        if url.startswith(scheme):
            return abs_path(url[len(scheme) :] or os.sep)
    if url.startswith("file:") and url[5:6] == "/":
        return abs_path(url[5:])
    if "::" in url or "://" in url:
        return None
    return abs_path(url)


def cache_files(ds: Any) -> list[dict[str, Any]]:
    try:
        files = ds.cache_files
    except Exception:  # not a Dataset, or a broken one
        return []
    return files if isinstance(files, list) else []


def split_of(ds: Any) -> str | None:
    split = getattr(ds, "_split", None)
    return str(split) if split is not None else None
