"""The naming rules of a `datasets` 5.x cache: what each file and folder name means.

This module is the one place that knows the patterns; the scan, verify and gc all ask it.
"""

from __future__ import annotations

import os
import re
from enum import Enum
from typing import Literal


class Kind(str, Enum):
    """What a cache entry is. The values are the words used in tables, filters and JSON."""

    SOURCE = "source"  # a prepared split: <name>-<split>.arrow or <name>-<split>-00000-of-00003.arrow
    DERIVED = "derived"  # cache-<fp>.arrow holding data (map, cast, flatten_indices, ...)
    INDICES = "indices"  # cache-<fp>.arrow holding one `indices: uint64` column (filter, sort, shuffle, ...)
    SHARDS = "shards"  # cache-<fp>_00000_of_00002.arrow ...: one num_proc map/filter, complete or partial
    SAVED = "saved"  # a save_to_disk folder (state.json + data-*.arrow); one entry per split of a DatasetDict
    ARROW = "arrow"  # any other Arrow file (a custom cache_file_name=, a folder of Arrow files)
    TEMP = "temp"  # tmp[a-z0-9_]{8}: a writer in progress, or the leftover of a killed one
    INCOMPLETE_PREPARE = "incomplete-prepare"  # <hash or version>.incomplete/ of an interrupted load_dataset
    INCOMPLETE_SAVE = "incomplete-save"  # data-*.arrow with no state.json: an interrupted save_to_disk
    LOCK = "lock"  # *.lock (filelock; never deleted by datasets on Linux)
    DOWNLOAD = "download"  # downloads/<sha256(url)>... (remote files only)
    EXTRACTED = "extracted"  # downloads/extracted/<sha256>/
    METADATA = "metadata"  # dataset_info.json, state.json, dataset_dict.json, LICENSE, downloads' .json
    UNREADABLE = "unreadable"  # an Arrow-named file that cannot be read (truncated, garbage, no permission)
    TF_CACHE = "tf-cache"  # a tf.data file cache: <prefix>.index, .data-*, _<n>.lockfile, *.tempstate*
    OTHER = "other"  # anything else: FIFOs, symlinks, files datasets does not write

    def __str__(self) -> str:
        return self.value


#: Kinds that hold a dataset state with a fingerprint (or a recomputable one).
DATA_KINDS = frozenset({Kind.SOURCE, Kind.DERIVED, Kind.INDICES, Kind.SHARDS, Kind.SAVED, Kind.ARROW})
#: Kinds `datasets` itself writes into a cache folder (its folders are where its leftovers can be).
WRITTEN_BY_DATASETS = frozenset({Kind.SOURCE, Kind.DERIVED, Kind.INDICES, Kind.SHARDS, Kind.SAVED})
#: Kinds that `cachetool gc --temp` is about.
LEFTOVER_KINDS = frozenset({Kind.TEMP, Kind.INCOMPLETE_PREPARE, Kind.INCOMPLETE_SAVE})
#: Kinds whose files a tool may move aside when they are damaged (`verify --quarantine`): what
#: `datasets` wrote and recomputes, and Arrow files read like its own. Never anything else
#: (metadata alone, locks, downloads, files it does not write), whatever a record says of it.
MOVABLE_KINDS = (
    (WRITTEN_BY_DATASETS - {Kind.SAVED}) | LEFTOVER_KINDS | {Kind.ARROW, Kind.UNREADABLE, Kind.TF_CACHE}
)

DATASET_INFO = "dataset_info.json"
STATE_JSON = "state.json"
DATASET_DICT_JSON = "dataset_dict.json"
METADATA_NAMES = frozenset({DATASET_INFO, STATE_JSON, DATASET_DICT_JSON, "dataset_infos.json", "LICENSE"})
LEDGER_DIR = ".cachetool"

# datasets' validate_fingerprint() refuses these characters and anything longer than 64.
_FP = r"[^<>:/\\|?*]{1,64}?"
CACHE_FILE_RE = re.compile(rf"^cache-(?P<fp>{_FP})(?:_(?P<rank>\d{{5}})_of_(?P<count>\d{{5}}))?\.arrow$")
TEMP_FILE_RE = re.compile(r"^tmp[a-z0-9_]{8}$")
SAVED_SHARD_RE = re.compile(r"^data-(?P<index>\d{5})-of-(?P<count>\d{5})\.arrow$")
SOURCE_SHARD_RE = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.(?:arrow|parquet)$")
INCOMPLETE_DIR_SUFFIX = ".incomplete"
#: What `datasets` names a preparation folder (and its `.incomplete`) after: a module hash or a version.
PREPARE_NAME_RE = re.compile(r"^(?:[0-9a-f]{16,64}|\d+\.\d+\.\d+)$")
TEMP_DIR_RE = re.compile(r"^hf_datasets-[a-z0-9_]{8}$")
#: What gc sets aside before it removes it (same folder, so a rename never crosses file systems):
#: `.cachetool-gc-<gc pid>-<n>`. Left behind only by a gc that was killed; the next gc removes it.
GC_TRASH_PREFIX = ".cachetool-gc-"
GC_TRASH_RE = re.compile(r"^\.cachetool-gc-(?P<pid>\d+)-\d+$")
POOL_DIR_RE = re.compile(r"^pymp-[a-z0-9_]{8}$")
#: The temp folder of a `cachetool check-determinism` run: `cachetool-determinism-<pid>-<random>`
#: (older ones have no pid).
CHECK_DIR_RE = re.compile(r"^cachetool-determinism-(?:(?P<pid>\d+)-)?[a-z0-9_]{8}$")


#: What a temp-dir folder gc looks at is: `hf_datasets-*`, `pymp-*` or `cachetool-determinism-*`.
TempKind = Literal["hf_datasets", "pymp", "determinism"]


def temp_folder_kind(name: str) -> TempKind | None:
    """What a temp-dir entry is to gc: "hf_datasets", "pymp", "determinism", or None (not ours)."""
    if TEMP_DIR_RE.match(name):
        return "hf_datasets"
    if POOL_DIR_RE.match(name):
        return "pymp"
    if CHECK_DIR_RE.match(name):
        return "determinism"
    return None


VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")


def parse_cache_file(name: str) -> tuple[str, int | None, int | None] | None:
    """`cache-<fp>.arrow` -> (fp, None, None); `cache-<fp>_00001_of_00004.arrow` -> (fp, 1, 4)."""
    fp = name[6:-6]
    if fp.isalnum() and fp.isascii() and len(fp) <= 64 and name[:6] == "cache-" and name[-6:] == ".arrow":
        return fp, None, None  # the usual name, told without the pattern (no `_`: no shard part)
    m = CACHE_FILE_RE.match(name)
    if m is None:
        return None
    rank, count = m.group("rank"), m.group("count")
    return m.group("fp"), (int(rank) if rank else None), (int(count) if count else None)


def shard_fingerprint(fp: str, rank: int, count: int) -> str:
    """The fingerprint `datasets` writes into the metadata of one num_proc shard."""
    return f"{fp}_{rank:05d}_of_{count:05d}"


def source_split_of(name: str, splits: list[str]) -> tuple[str, int | None, int | None] | None:
    """Match a prepared split file against the splits named in `dataset_info.json`.

    `csv-train.arrow` -> ("train", None, None); `events-train-00001-of-00002.arrow` -> ("train", 1, 2).
    Longest split names first, so `train` does not claim `my-train`.
    """
    index = count = None
    m = SOURCE_SHARD_RE.match(name)
    if m is not None:
        stem = m.group("prefix")
        index, count = int(m.group("index")), int(m.group("count"))
    else:
        stem, ext = os.path.splitext(name)
        if ext not in (".arrow", ".parquet"):
            return None
    for split in sorted(splits, key=len, reverse=True):
        if stem.endswith("-" + split) and len(stem) > len(split) + 1:
            return split, index, count
    return None


def is_incomplete_dir(name: str) -> bool:
    return name.endswith(INCOMPLETE_DIR_SUFFIX) and len(name) > len(INCOMPLETE_DIR_SUFFIX)


# -- Locks: filelock files `datasets` takes and never deletes on Linux -------------------------------
LOCK_SUFFIX = ".lock"
#: `<folder>_builder.lock` next to a builder folder while it is prepared (`builder.py`).
BUILDER_LOCK_SUFFIX = "_builder.lock"
#: `<folder>.incomplete_info.lock`: `<output dir>_info.lock` taken while the `.incomplete` folder
#: of a preparation writes its dataset_info.json.
INFO_LOCK_SUFFIX = INCOMPLETE_DIR_SUFFIX + "_info.lock"
#: filelock's shortened form of a name too long for the file system contains this; it cannot be
#: decoded back into the path it guards.
SHORTENED_LOCK_MARK = "..."


class LockKind(str, Enum):
    """What a lock file guards, by its name and place. The values are the words used in reasons."""

    BUILDER = "builder lock"  # <folder>_builder.lock: the builder folder (and its .incomplete)
    INFO = "info lock"  # <folder>.incomplete_info.lock: the same
    DOWNLOAD = "download lock"  # downloads/<name>.lock: downloads/<name> (and <name>.incomplete)
    EXTRACTION = "extraction lock"  # downloads/extracted/<sha>.lock: downloads/extracted/<sha>/
    ROOT = "builder root lock"  # <root>/<absolute folder path, "/" turned into "_">.lock

    def __str__(self) -> str:
        return self.value


def is_lock_name(name: str) -> bool:
    """A filelock file: `<anything>.lock` (what it guards: `parse_lock_name`)."""
    return name.endswith(LOCK_SUFFIX)


def builder_lock_name(folder_name: str) -> str:
    return folder_name + BUILDER_LOCK_SUFFIX


def info_lock_name(folder_name: str) -> str:
    return folder_name + INFO_LOCK_SUFFIX


def download_lock_name(download_name: str) -> str:
    return download_name + LOCK_SUFFIX


def root_lock_name(folder: str) -> str:
    """The lock `DatasetBuilder.__init__` takes in the cache root for the folder at the absolute
    path `folder` (as a POSIX string): every "/" turned into "_"."""
    return folder.replace("/", "_") + LOCK_SUFFIX


def parse_lock_name(name: str, parent: str, grandparent: str, in_root: bool) -> tuple[LockKind, str] | None:
    """What a lock's name and place say it guards: (kind, base). `base` is the guarded name in
    the same folder, or for a ROOT lock the mangled absolute path (leading "_"). `parent` and
    `grandparent` are the names of the folders holding the lock; `in_root`: it sits directly in
    the cache root. None: not a lock, or not one whose guard can be told from its name."""
    for suffix, kind in ((BUILDER_LOCK_SUFFIX, LockKind.BUILDER), (INFO_LOCK_SUFFIX, LockKind.INFO)):
        if name.endswith(suffix) and len(name) > len(suffix):
            return kind, name[: -len(suffix)]
    if not name.endswith(LOCK_SUFFIX) or len(name) <= len(LOCK_SUFFIX):
        return None
    base = name[: -len(LOCK_SUFFIX)]
    if parent == "extracted" and grandparent == "downloads":
        return LockKind.EXTRACTION, base
    if parent == "downloads":
        return LockKind.DOWNLOAD, base
    if in_root and base.startswith("_") and SHORTENED_LOCK_MARK not in base:
        return LockKind.ROOT, base
    return None
