"""Saved datasets on the remote (docs/remote.md): a `save_to_disk` folder (a `Dataset` or a
`DatasetDict`) pushed under a URL of its own, `s3://bucket/datasets/name/`, file by file with
write-once puts, then `saved.json` (written last: each file's path, size and xxh3, the
`state.json` fingerprint of each split; signed with `CACHETOOL_REMOTE_KEY` when set). A pull
reads that record, and when the folder it is told to fill already holds those fingerprints with
those files (by name and size) transfers nothing; else it downloads everything into a temporary
folder beside it, checks every size, xxh3 and Arrow stream, and only then renames it into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from cachetool.cache.layout import DATASET_DICT_JSON, STATE_JSON
from cachetool.cache.lease import Lease, lease_state
from cachetool.errors import CachetoolError
from cachetool.processes import process_start, this_host
from cachetool.remote.client import Remote, RemoteError, RemoteRefused, open_remote
from cachetool.remote.transfer import (
    RemoteFile,
    _download,
    _sign,
    _user,
    _versions,
    file_digest,
    listed_files,
    signed_document,
    stream_problem,
    upload,
)
from cachetool.safejson import json_fields, json_value, read_json_file

SAVED_RECORD = "saved.json"
SAVED_FORMAT = "cachetool-saved-record/1"
#: The metadata files `save_to_disk` writes beside the Arrow files of a split.
_SPLIT_FILES = (STATE_JSON, "dataset_info.json")


@dataclass(frozen=True)
class SavedRecord:
    """What a reader uses of a checked `saved.json`: the fingerprint of each split (`""` for a
    `Dataset`) and the files, by path relative to the dataset's folder."""

    fingerprints: dict[str, str]
    files: tuple[RemoteFile, ...]


@dataclass(frozen=True)
class SavedTransfer:
    """What `push_saved` or `pull_saved` did: the dataset's URL and local folder, its
    fingerprints, its files, the bytes sent or received now (0: there already), and whether a
    pull replaced another dataset in the folder (`--yes`)."""

    url: str
    folder: Path
    fingerprints: dict[str, str]
    files: tuple[str, ...]
    bytes: int = 0
    replaced: bool = False

    def to_json(self) -> dict[str, Any]:
        return json_fields(self)


# -- what a save_to_disk folder holds ----------------------------------------------------------
def saved_layout(folder: Path) -> tuple[dict[str, str], list[str]]:
    """(fingerprint of each split, the files `load_from_disk` reads, relative paths) of the
    `save_to_disk` folder `folder`. CachetoolError when it is not one."""
    if (folder / DATASET_DICT_JSON).is_file():
        doc = _json(folder / DATASET_DICT_JSON)
        splits = doc.get("splits") if isinstance(doc, dict) else None
        if not isinstance(splits, list) or not splits or not all(_plain_name(s) for s in splits):
            raise CachetoolError(f"{folder / DATASET_DICT_JSON}: not the list of splits save_to_disk writes")
        fingerprints, files = {}, [DATASET_DICT_JSON]
        for split in splits:
            fp, names = _split_layout(folder / split)
            fingerprints[split] = fp
            files += [f"{split}/{n}" for n in names]
        return fingerprints, files
    if (folder / STATE_JSON).is_file():
        fp, names = _split_layout(folder)
        return {"": fp}, names
    raise CachetoolError(
        f"{folder}: not a folder save_to_disk wrote (no {STATE_JSON} or {DATASET_DICT_JSON})"
    )


def _split_layout(folder: Path) -> tuple[str, list[str]]:
    """(`_fingerprint`, its files) of one split (a `Dataset`'s folder)."""
    doc = _json(folder / STATE_JSON)
    fp = doc.get("_fingerprint") if isinstance(doc, dict) else None
    data = doc.get("_data_files") if isinstance(doc, dict) else None
    named = [d.get("filename") for d in data if isinstance(d, dict)] if isinstance(data, list) else []
    names = [n for n in named if isinstance(n, str) and _plain_name(n)]
    if not isinstance(fp, str) or not fp or not names or len(names) != len(named):
        raise CachetoolError(
            f"{folder / STATE_JSON}: no fingerprint or data files as save_to_disk writes them"
        )
    return fp, [*(n for n in _SPLIT_FILES if (folder / n).is_file()), *names]


def _json(path: Path) -> Any:
    try:
        return read_json_file(path)
    except (OSError, ValueError) as e:
        raise CachetoolError(f"{path}: {getattr(e, 'strerror', None) or e}") from None


def _plain_name(name: object) -> bool:
    """A file or split name that stays in its folder: no separator, not hidden, not `..`."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= 255
        and "/" not in name
        and "\\" not in name
        and not name.startswith(".")
    )


# -- the record ------------------------------------------------------------------------------------
def make_saved_record(fingerprints: dict[str, str], files: list[RemoteFile], key: bytes | None) -> bytes:
    """The bytes of `saved.json` (signed with `key` when given)."""
    doc: dict[str, Any] = {
        "format": SAVED_FORMAT,
        "fingerprints": fingerprints,
        "files": json_value(files),
        "versions": _versions(),
        "host": socket.gethostname(),
        "user": _user(),
        "time": time.time(),
    }
    if key is not None:
        doc["signature"] = _sign(doc, key)
    return json.dumps(doc, sort_keys=True, indent=1).encode()


def read_saved_record(data: bytes, url: str, key: bytes | None) -> SavedRecord:
    """The record `data` of the saved dataset at `url`, checked: RemoteRefused saying why it is
    not used (not a record, a path leaving the folder, with `key` a missing or wrong signature)."""

    def refuse(why: str) -> RemoteRefused:
        return RemoteRefused(f"the saved dataset at {url} is not used: {why}")

    doc = signed_document(data, SAVED_FORMAT, key, refuse)
    fps = doc.get("fingerprints")
    if not (
        isinstance(fps, dict)
        and fps
        and all(isinstance(v, str) and v and (k == "" or _plain_name(k)) for k, v in fps.items())
    ):
        raise refuse("its fingerprints are malformed")
    files = listed_files(doc, refuse)
    for f in files:
        parts = PurePosixPath(f.name).parts
        if not 1 <= len(parts) <= 2 or not all(_plain_name(p) for p in parts) or "//" in f.name:
            raise refuse(f"{f.name[:80]!r} is not a path inside the dataset's folder")
    if len({f.name for f in files}) != len(files):
        raise refuse("it names a file twice")
    return SavedRecord(dict(fps), tuple(files))


# -- push and pull ----------------------------------------------------------------------------------
def push_saved(folder: str | os.PathLike[str], url: str, *, key: str | None = None) -> SavedTransfer:
    """Upload the `save_to_disk` folder `folder` to `url` (the dataset's own prefix), then its
    `saved.json`, with write-once puts. RemoteRefused (nothing replaced) when `url` holds another
    saved dataset, or other bytes at one of the files' keys."""
    remote = open_remote(url, key)
    local = Path(folder)
    fingerprints, names = saved_layout(local)
    files = [RemoteFile(n, *file_digest(local / n)) for n in names]
    done = SavedTransfer(remote.url, local, fingerprints, tuple(names))
    existing = remote.get(SAVED_RECORD)
    if existing is not None:
        return _same_saved(remote, existing, fingerprints, files, done)
    sent = upload(remote, files, local, "", "the dataset")
    if not remote.put_once(SAVED_RECORD, make_saved_record(fingerprints, files, remote.key)):
        return _same_saved(remote, remote.get(SAVED_RECORD) or b"", fingerprints, files, done)
    return SavedTransfer(remote.url, local, fingerprints, tuple(names), sent)


def _same_saved(
    remote: Remote, data: bytes, fingerprints: dict[str, str], files: list[RemoteFile], done: SavedTransfer
) -> SavedTransfer:
    """`done` when the remote's record `data` names these very files; else RemoteRefused."""
    try:
        record = read_saved_record(data, remote.url, None)
    except RemoteRefused as e:
        raise RemoteRefused(f"{remote.url} holds something else ({e.message}): not replaced") from None
    if record.fingerprints != fingerprints or set(record.files) != set(files):
        theirs = ", ".join(record.fingerprints.values())
        raise RemoteRefused(f"{remote.url} holds another saved dataset (fingerprint {theirs}): not replaced")
    return done


def pull_saved(
    url: str, to: str | os.PathLike[str], *, yes: bool = False, key: str | None = None
) -> SavedTransfer:
    """Fetch the saved dataset at `url` into the folder `to` (made when missing), so that
    `datasets.load_from_disk(to)` loads it. When `to` holds its fingerprints and files already,
    nothing is transferred. Every file is checked (size, xxh3, Arrow stream; with `key`, else
    `CACHETOOL_REMOTE_KEY`, the signature) before the folder gets its name: RemoteRefused, with
    nothing placed, when a check fails. A `to` holding anything else is replaced only with `yes`
    (else CachetoolError naming it)."""
    remote = open_remote(url, key)
    data = remote.get(SAVED_RECORD)
    if data is None:
        raise RemoteError(f"no saved dataset at {remote.url} (no {SAVED_RECORD}): push one with --saved")
    record = read_saved_record(data, remote.url, remote.key)
    target = Path(os.path.realpath(to))  # a link to a folder: the folder (the download goes beside it)
    if target.exists() and not target.is_dir():
        raise CachetoolError(f"{target} is not a folder: not replaced")
    names = tuple(f.name for f in record.files)
    done = SavedTransfer(remote.url, target, record.fingerprints, names)
    if _holds_record(target, record):
        return done
    holds = _holding(target)
    if holds is not None and not yes:
        what = f"another dataset (fingerprint {', '.join(holds.values())})" if holds else "other files"
        raise CachetoolError(f"{target} holds {what}: not replaced; pass --yes to replace it")
    with _staging(target) as staging:
        received = _fetch_all(remote, record, staging)
        try:
            replaced = _place(staging, target, holds is not None)
        except OSError:
            if not _holds_record(target, record):
                raise CachetoolError(
                    f"{target} was written meanwhile by another process: not replaced"
                ) from None
            replaced = False  # a concurrent pull placed the same dataset first
    return SavedTransfer(remote.url, target, record.fingerprints, names, received, replaced)


def _holds_record(folder: Path, record: SavedRecord) -> bool:
    """`folder` holds the saved dataset of `record`: its fingerprints, every file at its size."""
    return _holding(folder) == record.fingerprints and all(
        _sized(folder / f.name, f.size) for f in record.files
    )


def _holding(folder: Path) -> dict[str, str] | None:
    """None when `folder` is missing or empty; else the fingerprints of the saved dataset it holds
    ({} when it holds something else)."""
    try:
        if not any(os.scandir(folder)):
            return None
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return {}
    try:
        return saved_layout(folder)[0]
    except CachetoolError:
        return {}


def _sized(path: Path, size: int) -> bool:
    try:
        return os.lstat(path).st_size == size and path.is_file()
    except OSError:
        return False


@contextlib.contextmanager
def _staging(target: Path) -> Iterator[Path]:
    """A new folder beside `target`, removed on the way out unless it became `target`; named
    `.<name>.pull-<host>-<pid>-<start>-XXXXXXXX` after this process, so that a later pull to
    `target` can tell it dead once this one is killed (`_remove_dead_staging`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_staging(target)
    pid = os.getpid()
    start = process_start(pid) or time.time()
    staging = target.parent / f".{target.name}.pull-{_host_tag()}-{pid}-{start:.0f}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _host_tag() -> str:
    """This kernel and PID namespace, short: a staging folder of another host is never judged."""
    me = this_host()
    return hashlib.blake2b(f"{me.boot_id}:{me.pid_ns}".encode(), digest_size=6).hexdigest()


def _remove_dead_staging(target: Path) -> None:
    """Remove the staging folders of pulls to `target` killed on this host: their process is
    gone, or another one has its pid (the rule of a lease, `lease_state`). Another host's, a
    live one, another user's and anything not a folder of ours stay."""
    me, tag = this_host(), _host_tag()
    if not me.boot_id:  # nothing tells this kernel from another
        return
    prefix = f".{target.name}.pull-{tag}-"
    with contextlib.suppress(OSError), os.scandir(target.parent) as found:
        for entry in found:
            pid, _, rest = entry.name.removeprefix(prefix).partition("-")
            start = rest.partition("-")[0]
            if not (entry.name.startswith(prefix) and pid.isdigit() and start.isdigit()):
                continue
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            owner = Lease(Path(entry.path), me.host, me.boot_id, int(pid), me.pid_ns, float(start), 0.0, 1.0)
            if lease_state(owner, me) == "dead":
                shutil.rmtree(entry.path, ignore_errors=True)


def _fetch_all(remote: Remote, record: SavedRecord, staging: Path) -> int:
    """Download and check every file of `record` into `staging`; the bytes received."""
    for name in {PurePosixPath(f.name).parent for f in record.files} - {PurePosixPath(".")}:
        (staging / name).mkdir()

    def fetch(f: RemoteFile) -> int:
        where = staging / f.name
        fd = os.open(where.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            got = _download(remote, f.name, fd, where.name, f)
        finally:
            os.close(fd)
        if where.suffix == ".arrow":
            _check_stream(where, f.name)
        return got

    with ThreadPoolExecutor(min(8, len(record.files))) as pool:
        received = sum(pool.map(fetch, record.files))
    for split, fp in record.fingerprints.items():
        state = staging / split / STATE_JSON if split else staging / STATE_JSON
        try:
            got_fp, _ = _split_layout(state.parent)
        except CachetoolError:
            got_fp = None
        if got_fp != fp:
            raise RemoteRefused(
                f"{remote.url}: the {STATE_JSON} of {split or 'the dataset'} is not {fp}'s: not used"
            )
    try:
        saved_layout(staging)
    except CachetoolError as e:
        raise RemoteRefused(f"{remote.url} is not used: {e.message}") from None
    return received


def _check_stream(path: Path, name: str) -> None:
    """The downloaded file is a whole Arrow stream (to its end-of-stream marker)."""
    _, why = stream_problem(path)
    if why is not None:
        raise RemoteRefused(f"{name} from the remote is not used: {why}")


def _place(staging: Path, target: Path, replace: bool) -> bool:
    """Give `staging` the name `target` (an empty or missing folder; with `replace`, one holding
    something else, which is removed once the new one stands). Whether something was replaced."""
    if not replace:
        if target.is_dir():
            target.rmdir()  # empty (OSError when something was written there meanwhile)
        os.rename(staging, target)
        return False
    old = target.parent / f".{target.name}.old-{secrets.token_hex(4)}"
    os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
    return True
