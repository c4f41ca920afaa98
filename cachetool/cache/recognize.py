"""What a folder is, from its names and the small JSON files `datasets` writes: a saved dataset
(`state.json`), a saved DatasetDict (`dataset_dict.json`), a `save_to_disk` that did not finish,
or a prepared builder folder (`<name>/<config>/<version>[/<hash>]`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.walk import Item

#: Metadata files larger than this are not read (a real dataset_info.json is a few kB to a few MB).
MAX_JSON_BYTES = 64 * 1024 * 1024


def read_json(path: Path) -> Any:
    """A small JSON file `datasets` wrote, or None: regular files only (a FIFO is never waited
    on), size-capped, and nesting too deep to parse is a bad file like any other."""
    from cachetool.safejson import read_json_file

    try:
        return read_json_file(path, MAX_JSON_BYTES)
    except (OSError, ValueError):
        return None


def is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def is_dataset_dict(path: Path) -> bool:
    """`dataset_dict.json` as `DatasetDict.save_to_disk` writes it: {"splits": ["train", ...]}."""
    doc = read_json(path)
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("splits"), list)
        and all(isinstance(x, str) for x in doc["splits"])
    )


def is_datasets_state(state: Any) -> bool:
    """A `state.json` as `Dataset.save_to_disk` writes it: `_fingerprint` is a string and
    `_data_files` names the whole set `data-00000-of-0000N.arrow` … `data-<N-1>-of-0000N.arrow`.
    Such a folder is a saved dataset even when none of its data files remain (a damaged save
    verify reports). Anything else is a user's file."""
    if not isinstance(state, dict) or not isinstance(state.get("_fingerprint"), str):
        return False
    files = state.get("_data_files")
    if not isinstance(files, list) or not files:
        return False
    named = [d.get("filename") if isinstance(d, dict) else None for d in files]
    shards = [layout.SAVED_SHARD_RE.match(n) if isinstance(n, str) else None for n in named]
    if not all(shards):
        return False
    return sorted((int(m["index"]), int(m["count"])) for m in shards if m) == [
        (i, len(shards)) for i in range(len(shards))
    ]


def is_interrupted_save(items: Sequence[Item]) -> bool:
    """Only what `save_to_disk` writes (data-NNNNN-of-NNNNN.arrow, dataset_info.json, locks),
    and the data files are Arrow streams or empty: a killed save, not a user's folder."""
    for it in items:
        if it.is_dir:
            if it.name != layout.LEDGER_DIR:
                return False
            continue
        if it.name in (layout.DATASET_INFO, "dataset_infos.json") or layout.is_lock_name(it.name):
            continue
        if not layout.SAVED_SHARD_RE.match(it.name) or not looks_like_arrow_stream(it.path):
            return False
    return True


def looks_like_arrow_stream(path: Path) -> bool:
    """Empty, or starting as every Arrow IPC stream `datasets` writes starts (the continuation
    marker `ff ff ff ff`): what a killed writer leaves. A user's text file is neither."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOATIME", 0))
    except OSError:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, 4)
    except OSError:
        return False
    finally:
        os.close(fd)
    return head in (b"", b"\xff\xff\xff\xff")


def relative_data_dir(path: Path) -> str | None:
    """`<name>/<config>/<version>[/<hash>]`, as `DatasetBuilder._relative_data_dir` builds it.

    Recognised by the version level (`0.0.0`), not by depth below the root: a builder folder is
    3 levels deep without a module hash and 4 with one.
    """
    parts = path.parts
    if len(parts) >= 3 and layout.VERSION_RE.match(parts[-1]):
        return "/".join(parts[-3:])
    if len(parts) >= 4 and layout.VERSION_RE.match(parts[-2]):
        return "/".join(parts[-4:])
    return None
