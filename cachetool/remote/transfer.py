"""`push` and `pull`: one step's cache files to the remote and back (docs/remote.md). Push writes
each file once, then the record; pull downloads under `tmpXXXXXXXX` names, checks sizes, xxh3 and
the Arrow stream, and only then links each file to its name (never replacing one).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cachetool.cache.layout import parse_cache_file, shard_fingerprint
from cachetool.remote.client import Remote, RemoteError, RemoteRefused, open_remote
from cachetool.remote.record import RECORD_NAME, Record, RemoteFile, read_record
from cachetool.safejson import json_fields

_CHUNK = 8 << 20


@dataclass(frozen=True)
class Pushed:
    """What `push` did for one fingerprint: the files, the bytes sent now; `already`: a record
    was on the remote before (nothing was written), `same`: it names these very files,
    `refused`: why a reader with this key does not use it (unsigned, another key; else "")."""

    fingerprint: str
    files: tuple[str, ...]
    sent: int = 0
    already: bool = False
    same: bool = True
    refused: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "file_names": list(self.files),
            "bytes_sent": self.sent,
            "already_on_remote": self.already,
            "same_files": self.same,
            "refused": self.refused,
        }


@dataclass(frozen=True)
class Pulled:
    """What `pull` did for one fingerprint: the files now in the cache, the bytes downloaded
    (0 when every file was there already), and the files the cache held already with other bytes
    than the remote's (kept)."""

    fingerprint: str
    files: tuple[Path, ...]
    received: int = 0
    other_bytes: tuple[Path, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "paths": [os.fspath(f) for f in self.files],
            "bytes_received": self.received,
            "other_bytes": [os.fspath(f) for f in self.other_bytes],
        }


# -- the Python functions (and `cachetool remote push|pull`) ---------------------------------------
def push(
    fingerprints: Sequence[str] = (),
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    remote: str | None = None,
    key: str | None = None,
) -> list[Pushed]:
    """Upload the cache files of each fingerprint (a unique prefix, or a cache file's path, as
    every command takes them; none: every cache file of the root) and their producer records to
    the remote (`remote`, else `CACHETOOL_REMOTE`), records signed with `key` (else
    `CACHETOOL_REMOTE_KEY`, when set). What is on the remote already is never replaced: pushing
    again sends nothing. RemoteRefused when an object of other bytes stands where a file would go."""
    from cachetool.cache.dirs import root_for
    from cachetool.cache.lookup import find_entry
    from cachetool.cache.scan import scan_cache

    target = open_remote(remote, key)
    root = root_for(fingerprints[0] if len(fingerprints) == 1 else None, cache_dir)
    report = scan_cache(root)
    if fingerprints:
        entries = [find_entry(report, name) for name in fingerprints]
    else:
        entries = [e for e in report.entries if e.fingerprint and _cache_files(e.files)]
    done = []
    for entry in entries:
        names = _cache_files(entry.files)
        if not names or entry.fingerprint is None:
            raise RemoteError(
                f"{entry.id} is a {entry.kind.value} entry: only cache-<fp>.arrow files are pushed"
            )
        done.append(push_step(target, root, entry.path.parent, entry.fingerprint))
    return done


def pull(
    fingerprint: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    remote: str | None = None,
    key: str | None = None,
) -> Pulled:
    """Download the result `fingerprint` (whole) from the remote (`remote`, else
    `CACHETOOL_REMOTE`) into the cache root, where its producer had it, so that `datasets` loads
    it as a cache hit. With `key` (else `CACHETOOL_REMOTE_KEY`) only a record signed with it is
    used. RemoteError when the remote has no record of it; RemoteRefused (nothing placed) when a
    check fails: a checksum, the Arrow stream, the signature."""
    from cachetool.cache.dirs import existing_root

    target = open_remote(remote, key)
    root = existing_root(cache_dir)
    record = fetch_record(target, fingerprint)
    if record is None:
        raise RemoteError(f"{fingerprint} is not on the remote {target.url}")
    started = time.monotonic()
    got = pull_record(target, record, root / record.folder)
    if got.received:
        note_served(root, got, time.monotonic() - started, target.url)
        return got
    folder = root / record.folder  # every file was there: are they the remote's?
    other = tuple(folder / f.name for f in record.files if file_digest(folder / f.name) != (f.size, f.xxh3))
    return replace(got, other_bytes=other)


# -- the steps ----------------------------------------------------------------------------------
def push_step(
    remote: Remote,
    root: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    fingerprint: str,
    call_site: Any = None,
) -> Pushed:
    """Push the cache files of `fingerprint` in `folder` (inside the cache root `root`)."""
    names = cache_files_of(folder, fingerprint)
    if not names:
        raise RemoteError(f"no cache file of {fingerprint} in {folder}")
    files = [RemoteFile(name, *file_digest(Path(folder, name))) for name in names]
    existing = remote.get(f"{fingerprint}/{RECORD_NAME}")
    if existing is not None:
        return Pushed(fingerprint, tuple(names), 0, True, *_same(existing, fingerprint, remote, files))
    sent = 0
    for f in files:
        key = f"{fingerprint}/{f.name}"
        if remote.put_once(key, Path(folder, f.name)):
            sent += f.size
        elif object_digest(remote, key) != (f.size, f.xxh3):
            raise RemoteRefused(
                f"{remote.url}/{key} already holds other bytes (an upload of another writer): "
                f"not replaced, {fingerprint} not pushed"
            )
    from cachetool.remote.record import make_record

    if call_site is None:
        call_site = _call_site(root, fingerprint)
    rel = Path(os.path.relpath(folder, root)).as_posix()
    data = make_record(fingerprint, rel, files, _versions(), call_site, remote.key)
    if not remote.put_once(f"{fingerprint}/{RECORD_NAME}", data):  # another writer was first
        again = remote.get(f"{fingerprint}/{RECORD_NAME}") or b""
        return Pushed(fingerprint, tuple(names), sent, True, *_same(again, fingerprint, remote, files))
    return Pushed(fingerprint, tuple(names), sent)


def pull_record(remote: Remote, record: Record, folder: Path) -> Pulled:
    """Place the files of the checked `record` in `folder`; see the module's docstring."""
    fp = record.fingerprint
    present = [f for f in record.files if os.path.lexists(folder / f.name)]
    if len(present) == len(record.files):
        return Pulled(fp, tuple(folder / f.name for f in record.files))
    folder.mkdir(parents=True, exist_ok=True)
    temps: list[tuple[str, RemoteFile]] = []
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        temps = [(f"tmp{secrets.token_hex(4)}", f) for f in record.files if f not in present]

        def fetch(item: tuple[str, RemoteFile]) -> int:
            tmp, f = item
            got = _download(remote, f"{fp}/{f.name}", dir_fd, tmp, f)
            _check_arrow(folder / tmp, f, fp)
            return got

        if len(temps) == 1:
            received = fetch(temps[0])
        else:  # the shards of a num_proc map at once; one failed check refuses them all
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(8, len(temps))) as pool:
                received = sum(pool.map(fetch, temps))
        for tmp, f in temps:
            try:
                os.link(tmp, f.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:  # another process placed (or wrote) it meanwhile: theirs stays
                pass
        return Pulled(fp, tuple(folder / f.name for f in record.files), received)
    finally:
        for tmp, _ in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
        os.close(dir_fd)


def _download(remote: Remote, key: str, dir_fd: int, tmp: str, f: RemoteFile) -> int:
    """Write the object `key` to the new file `tmp` (in `dir_fd`), checking its size and xxh3."""
    import xxhash

    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    mask = os.umask(0)
    os.umask(mask)
    fd = os.open(tmp, flags, 0o666 & ~mask, dir_fd=dir_fd)
    h, size = xxhash.xxh3_64(), 0
    with os.fdopen(fd, "wb") as out:
        try:
            for chunk in remote.chunks(key):
                size += len(chunk)
                if size > f.size:
                    break
                h.update(chunk)
                out.write(chunk)
        except FileNotFoundError:
            raise RemoteRefused(f"{remote.url}/{key}: missing, though its record names it") from None
    if size != f.size:
        raise RemoteRefused(f"{remote.url}/{key}: {size} bytes, its record says {f.size}: not used")
    if h.hexdigest() != f.xxh3:
        raise RemoteRefused(f"{remote.url}/{key}: its xxh3 is not the one its record names: not used")
    return size


def _check_arrow(path: Path, f: RemoteFile, fingerprint: str) -> None:
    """The downloaded file is a whole Arrow stream (to its end-of-stream marker) of `fingerprint`
    (of its shard's fingerprint for a `num_proc` shard), as `cachetool verify` reads one."""
    from cachetool.cache.arrow import STREAM, read_summary

    summary = read_summary(path)
    why = summary.error
    if why is None and summary.format != STREAM:
        why = f"not an Arrow stream ({summary.format})"
    parsed = parse_cache_file(f.name)
    want = fingerprint
    if parsed is not None and parsed[1] is not None and parsed[2] is not None:
        want = shard_fingerprint(fingerprint, parsed[1], parsed[2])
    if why is None and summary.fingerprint is not None and summary.fingerprint != want:
        why = f"its metadata names fingerprint {summary.fingerprint}, not {want}"
    if why is not None:
        raise RemoteRefused(f"{f.name} from the remote is not used: {why}")


# -- what the remote served --------------------------------------------------------------------
#: One line per result pulled into a root: when, by which host, how many bytes, in how long.
SERVED_LOG = "remote.jsonl"


@dataclass(frozen=True)
class Served:
    """What the remote gave one host of a root: results, bytes, seconds spent pulling them."""

    host: str
    results: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return json_fields(self)


def note_served(root: str | os.PathLike[str], pulled: Pulled, seconds: float, url: str) -> None:
    """Append to the root's log that `pulled` came from the remote `url` (never raises)."""
    import json
    import socket

    from cachetool.cache.layout import LEDGER_DIR
    from cachetool.cache.store import append_state

    line = {"v": 1, "time": time.time(), "host": socket.gethostname(), "fingerprint": pulled.fingerprint}
    line |= {"bytes": pulled.received, "seconds": round(seconds, 3), "remote": url}
    with contextlib.suppress(OSError, ValueError):
        append_state(Path(root, LEDGER_DIR, SERVED_LOG), (json.dumps(line) + "\n").encode())


def served(root: str | os.PathLike[str], since: float | None = None) -> list[Served]:
    """Per host, what the remote served into `root` (since `since`, seconds since the epoch)."""
    import json

    from cachetool.cache.layout import LEDGER_DIR
    from cachetool.cache.store import read_state

    try:
        data = read_state(Path(root, LEDGER_DIR, SERVED_LOG))
    except (OSError, ValueError):
        return []
    hosts: dict[str, Served] = {}
    for raw in data.splitlines():
        try:
            d = json.loads(raw)
            t, host, n, s = float(d["time"]), str(d["host"]), int(d["bytes"]), float(d["seconds"])
        except (ValueError, TypeError, KeyError, RecursionError):
            continue  # a torn or foreign line (UnicodeDecodeError is a ValueError)
        if since is not None and t < since:
            continue
        h = hosts.get(host, Served(host))
        hosts[host] = Served(host, h.results + 1, h.bytes + n, h.seconds + s)
    return sorted(hosts.values(), key=lambda h: h.host)


# -- helpers ------------------------------------------------------------------------------------
def cache_files_of(folder: str | os.PathLike[str], fingerprint: str) -> list[str]:
    """The names of the cache files of `fingerprint` in `folder` (its file, its shards)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    prefix = f"cache-{fingerprint}"
    return sorted(
        n
        for n in names
        if n.startswith(prefix) and (p := parse_cache_file(n)) is not None and p[0] == fingerprint
    )


def _cache_files(files: Iterable[Any]) -> list[str]:
    return [f.path.name for f in files if parse_cache_file(f.path.name) is not None]


def _digest(chunks: Iterable[bytes]) -> tuple[int, str]:
    """(size, xxh3-64 hex) of the bytes `chunks` hold."""
    import xxhash

    h, size = xxhash.xxh3_64(), 0
    for chunk in chunks:
        size += len(chunk)
        h.update(chunk)
    return size, h.hexdigest()


def file_digest(path: Path) -> tuple[int, str]:
    """(size, xxh3-64 hex) of the local file `path`."""
    with open(path, "rb") as f:
        return _digest(iter(lambda: f.read(_CHUNK), b""))


def object_digest(remote: Remote, key: str) -> tuple[int, str]:
    """(size, xxh3-64 hex) of the object `key`, read whole."""
    return _digest(remote.chunks(key))


def fetch_record(remote: Remote, fingerprint: str) -> Record | None:
    """The checked record of `fingerprint` on the remote, None when there is none."""
    data = remote.get(f"{fingerprint}/{RECORD_NAME}")
    return None if data is None else read_record(data, fingerprint, remote.key)


def _same(data: bytes, fingerprint: str, remote: Remote, files: list[RemoteFile]) -> tuple[bool, str]:
    """Whether the remote's record `data` names these very `files`, and why a reader with the
    remote's key refuses it (else "")."""
    try:
        same = set(read_record(data, fingerprint, None).files) == set(files)
    except RemoteRefused as e:  # not a record any reader uses
        return False, str(e)
    try:
        read_record(data, fingerprint, remote.key)
    except RemoteRefused as e:
        return same, str(e)
    return same, ""


def _versions() -> dict[str, str]:
    """The versions of cachetool, Python, datasets and pyarrow that made the files."""
    import platform
    from importlib import metadata

    from cachetool import __version__

    out = {"cachetool": __version__, "python": platform.python_version()}
    for name in ("datasets", "pyarrow"):
        mod = sys.modules.get(name)
        version = getattr(mod, "__version__", None)
        if version is None:
            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                version = "?"
        out[name] = str(version)
    return out


def _call_site(root: str | os.PathLike[str], fingerprint: str) -> Any:
    """The call site the ledger of `root` records for the step that made `fingerprint`."""
    try:
        from cachetool.history.ledger import read_ledger

        for rec in reversed(read_ledger(root).for_result(fingerprint)):
            if rec.call_site is not None:
                return rec.call_site.to_json()
    except Exception:  # the record is still worth writing without it
        return None
    return None
