"""Results on the remote (docs/remote.md): the producer record of each (`<fp>/record.json`, written
after the files it names: name, size, xxh3; HMAC-signed with a key; a reader trusts nothing in it it
has not checked), `push` and `pull`, and the hooks of a traced run. Push writes each file once,
then the record; pull downloads under `tmpXXXXXXXX` names, checks sizes, xxh3 and the Arrow stream,
and only then links each file to its name (never replacing one).
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import hmac
import json
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from cachetool.cache.layout import parse_cache_file, shard_fingerprint
from cachetool.formatting import human_size
from cachetool.remote.client import (
    KEY_ENV,
    REMOTE_ENV,
    Remote,
    RemoteError,
    RemoteRefused,
    TooLarge,
    open_remote,
)
from cachetool.safejson import json_value

_CHUNK = 8 << 20


# -- the producer record ------------------------------------------------------------------------
RECORD_NAME = "record.json"
FORMAT = "cachetool-remote-record/1"
#: A record larger than this is not read (one lists a few files).
MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class RemoteFile:
    """One file of a result: its name in the cache folder, size in bytes, xxh3-64 (hex)."""

    name: str
    size: int
    xxh3: str


@dataclass(frozen=True)
class Record:
    """What a reader uses of a checked producer record."""

    fingerprint: str
    folder: str  # where the files live, relative to a cache root (posix)
    files: tuple[RemoteFile, ...]


def make_record(
    fingerprint: str,
    folder: str,
    files: list[RemoteFile],
    versions: dict[str, str],
    call_site: Any,
    key: bytes | None,
) -> bytes:
    """The bytes of the record of `files` (signed with `key` when given)."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "fingerprint": fingerprint,
        "folder": folder,
        "files": json_value(files),
        "versions": versions,
        "host": socket.gethostname(),
        "user": _user(),
        "time": time.time(),
        "call_site": call_site,
    }
    if key is not None:
        doc["signature"] = _sign(doc, key)
    return json.dumps(doc, sort_keys=True, indent=1).encode()


def read_record(data: bytes, fingerprint: str, key: bytes | None) -> Record:
    """The record `data` for `fingerprint`, checked: RemoteRefused saying why it is not used
    (not a record, another fingerprint, a file name that is not one of its cache files, a folder
    outside the root, and with `key` a missing or wrong signature)."""

    def refuse(why: str) -> RemoteRefused:
        return RemoteRefused(f"the remote record of {fingerprint} is not used: {why}")

    doc = signed_document(data, FORMAT, key, refuse)
    if doc.get("fingerprint") != fingerprint:
        raise refuse(f"it names another fingerprint ({str(doc.get('fingerprint'))[:70]})")
    folder = doc.get("folder")
    parts = PurePosixPath(folder).parts if isinstance(folder, str) else ("..",)
    if not isinstance(folder, str) or folder.startswith("/") or ".." in parts or "\\" in folder:
        raise refuse("its folder is not a relative path inside a cache root")
    files = listed_files(doc, refuse)
    for f in files:
        parsed = parse_cache_file(f.name)
        if parsed is None or parsed[0] != fingerprint or "/" in f.name:
            raise refuse(f"{f.name[:80]!r} is not a cache file of {fingerprint}")
    return Record(fingerprint, folder, tuple(files))


def signed_document(
    data: bytes, fmt: str, key: bytes | None, refuse: Callable[[str], RemoteRefused]
) -> dict[str, Any]:
    """The JSON object of the record `data` of format `fmt`, its signature checked with `key`
    (`refuse(why)` raised when it is not one, or not signed with `key`)."""
    if len(data) > MAX_RECORD_BYTES:
        raise refuse(f"larger than {MAX_RECORD_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise refuse("not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise refuse("not a cachetool record")
    signature = doc.get("signature")
    if key is not None:
        if not isinstance(signature, str):
            raise refuse(f"unsigned, and {KEY_ENV} is set")
        if not hmac.compare_digest(signature, _sign(doc, key)):
            raise refuse(f"its signature does not match {KEY_ENV}")
    return doc


def listed_files(doc: dict[str, Any], refuse: Callable[[str], RemoteRefused]) -> list[RemoteFile]:
    """The files a record `doc` names (at least one, each with a name, a size and an xxh3)."""
    files = []
    raw = doc.get("files")
    for f in raw if isinstance(raw, list) and raw else [None]:
        if not (
            isinstance(f, dict)
            and isinstance(f.get("name"), str)
            and isinstance(f.get("size"), int)
            and f["size"] >= 0
            and isinstance(f.get("xxh3"), str)
        ):
            raise refuse("its list of files is malformed")
        files.append(RemoteFile(f["name"], f["size"], f["xxh3"]))
    return files


def _sign(doc: dict[str, Any], key: bytes) -> str:
    body = {k: v for k, v in doc.items() if k != "signature"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container)
        return "?"


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
    from cachetool.cache.locations import root_for
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
    from cachetool.cache.locations import existing_root

    target = open_remote(remote, key)
    root = existing_root(cache_dir)
    record = fetch_record(target, fingerprint)
    if record is None:
        raise RemoteError(f"{fingerprint} is not on the remote {target.url}")
    folder = root / record.folder
    got = pull_record(target, record, folder, root)
    if got.received:
        return got
    # Every file was there: are they the remote's?
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
    sent = upload(remote, files, folder, f"{fingerprint}/", fingerprint)
    if call_site is None:
        call_site = _call_site(root, fingerprint)
    rel = Path(os.path.relpath(folder, root)).as_posix()
    data = make_record(fingerprint, rel, files, _versions(), call_site, remote.key)
    if not remote.put_once(f"{fingerprint}/{RECORD_NAME}", data):  # another writer was first
        again = remote.get(f"{fingerprint}/{RECORD_NAME}") or b""
        return Pushed(fingerprint, tuple(names), sent, True, *_same(again, fingerprint, remote, files))
    return Pushed(fingerprint, tuple(names), sent)


def upload(
    remote: Remote, files: Sequence[RemoteFile], folder: str | os.PathLike[str], prefix: str, what: str
) -> int:
    """Put each file of `folder` at `prefix` + its name, write-once; the bytes sent now.
    RemoteRefused when other bytes stand at one of those keys (`what` was not pushed)."""
    remote.check_sizes((os.path.join(folder, f.name), f.size) for f in files)
    sent = 0
    for f in files:
        key = prefix + f.name
        if remote.put_once(key, Path(folder, f.name)):
            sent += f.size
        elif object_digest(remote, key) != (f.size, f.xxh3):
            raise RemoteRefused(
                f"{remote.url}/{key} already holds other bytes (an upload of another writer): "
                f"not replaced, {what} not pushed"
            )
    return sent


def pull_record(remote: Remote, record: Record, folder: Path, root: str | os.PathLike[str]) -> Pulled:
    """Place the files of the checked `record` in `folder` (see the module's docstring), and note
    in the cache root `root` what was received."""
    fp, started = record.fingerprint, time.monotonic()
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

        # The shards of a num_proc map at once; one failed check refuses them all.
        with ThreadPoolExecutor(min(8, len(temps))) as pool:
            received = sum(pool.map(fetch, temps))
        for tmp, f in temps:
            try:
                os.link(tmp, f.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:  # another process placed (or wrote) it meanwhile: theirs stays
                pass
        pulled = Pulled(fp, tuple(folder / f.name for f in record.files), received)
        note_served(root, pulled, time.monotonic() - started, remote.url)
        return pulled
    finally:
        for tmp, _ in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
        os.close(dir_fd)


def _download(remote: Remote, key: str, dir_fd: int, tmp: str, f: RemoteFile) -> int:
    """Write the object `key` to the new file `tmp` (in `dir_fd`), checking its size and xxh3."""
    import xxhash

    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    # The umask applies, as to a file `datasets` writes (never set here: the shards download at once).
    fd = os.open(tmp, flags, 0o666, dir_fd=dir_fd)
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


def stream_problem(path: Path) -> tuple[Any, str | None]:
    """The summary of a downloaded file, and why it is not a whole Arrow stream (None: it is)."""
    from cachetool.cache.arrow import STREAM, read_summary

    summary = read_summary(path)
    why = summary.error
    if why is None and summary.format != STREAM:
        why = f"not an Arrow stream ({summary.format})"
    return summary, why


def _check_arrow(path: Path, f: RemoteFile, fingerprint: str) -> None:
    """The downloaded file is a whole Arrow stream (to its end-of-stream marker) of `fingerprint`
    (of its shard's fingerprint for a `num_proc` shard), as `cachetool verify` reads one."""
    summary, why = stream_problem(path)
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


def note_served(root: str | os.PathLike[str], pulled: Pulled, seconds: float, url: str) -> None:
    """Append to the root's log that `pulled` came from the remote `url` (never raises)."""
    from cachetool.cache.layout import LEDGER_DIR
    from cachetool.cache.store import append_state

    line = {"v": 1, "time": time.time(), "host": socket.gethostname(), "fingerprint": pulled.fingerprint}
    line |= {"bytes": pulled.received, "seconds": round(seconds, 3), "remote": url}
    with contextlib.suppress(OSError, ValueError):
        append_state(Path(root, LEDGER_DIR, SERVED_LOG), (json.dumps(line) + "\n").encode())


def served(root: str | os.PathLike[str], since: float | None = None) -> list[Served]:
    """Per host, what the remote served into `root` (since `since`, seconds since the epoch)."""
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


# -- the hooks of a traced run ------------------------------------------------------------------
def _say(message: str) -> None:
    sys.stderr.write(f"cachetool: {message}\n")


class RemoteHook:
    """Pull on a miss, push after a compute, for one traced process."""

    def __init__(self, remote: Remote) -> None:
        self.remote = remote
        self._failed = False
        self._leases: Any = None  # `cachetool.remote.step_leases.RemoteLeases`, once `--once` needs one

    def before_compute(self, path: str, kwargs: Mapping[str, Any], once: bool = False) -> None:
        """A step (called with `kwargs`) is about to look for its cache file `path`: when neither
        it nor one of its shards is there, place the remote's copy (checked) so that `datasets`
        finds it. Not for a step told to compute (`load_from_cache_file=False`), nor with caching
        off. With `once` (`cachetool run --once`), when the remote has no copy either, wait while
        a process of another host computes it (its lease on the remote), then place its copy;
        or take the lease: this process computes (`end_call` gives it back)."""
        folder, name = os.path.split(path)
        parsed = parse_cache_file(name)
        if kwargs.get("load_from_cache_file") is False or parsed is None or self._failed:
            return
        fingerprinting = sys.modules.get("datasets.fingerprint")
        if fingerprinting is not None and not fingerprinting.is_caching_enabled():
            return  # `disable_caching()`: datasets would not load it
        if cache_files_of(folder, parsed[0]):
            return
        try:
            record = fetch_record(self.remote, parsed[0])
            if record is None and once and not kwargs.get("keep_in_memory"):
                record = self._wait_turn(parsed[0])
            if record is None:
                return
            from cachetool.cache.locations import enclosing_root

            pulled = pull_record(self.remote, record, Path(folder), enclosing_root(folder))
            _say(f"{parsed[0]} from {self.remote.url} ({human_size(pulled.received)}, checked)")
        except RemoteRefused as e:
            _say(f"{e.message}; the step computes here")
        except Exception as e:
            self._give_up(e)

    def after_compute(self, records: Iterable[Any]) -> None:
        """Push what the steps of `records` (ledger records) computed and wrote in a cache root."""
        from cachetool.history.records.steps import StepRecord

        seen = set()
        for rec in records:
            if not (isinstance(rec, StepRecord) and rec.computed and rec.root) or self._failed:
                continue
            for f in rec.files:
                folder, name = os.path.split(f.path)
                parsed = parse_cache_file(name)
                inside = folder.startswith(rec.root.rstrip("/") + "/")
                if f.status != "written" or parsed is None or not inside or (folder, parsed[0]) in seen:
                    continue
                seen.add((folder, parsed[0]))
                call_site = rec.call_site.to_json() if rec.call_site is not None else None
                try:
                    push_step(self.remote, rec.root, folder, parsed[0], call_site)
                except (RemoteRefused, TooLarge) as e:
                    _say(e.message)
                except Exception as e:
                    self._give_up(e)

    def _wait_turn(self, fingerprint: str) -> Record | None:
        """`--once`: the record of `fingerprint` once another process pushed it; None when this
        process took the step's lease on the remote (it computes and pushes)."""
        if self._leases is None:
            from cachetool.remote.step_leases import RemoteLeases

            self._leases = RemoteLeases(self.remote)
        found: list[Record] = []

        def ready() -> bool:
            record = fetch_record(self.remote, fingerprint)
            found.extend([record] if record is not None else [])
            return record is not None

        self._leases.take(fingerprint, ready)
        return found[-1] if found else None

    def end_call(self) -> None:
        """The user's call ended (after `after_compute` pushed what it computed): give back the
        remote leases it took."""
        if self._leases is not None:
            self._leases.give_back_all()

    def _give_up(self, e: Exception) -> None:
        self._failed = True
        why = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
        _say(f"the remote is not used for the rest of this run: {why}")


def hook_from_env() -> RemoteHook | None:
    """The hooks of the remote `CACHETOOL_REMOTE` names; None (nothing imported) when unset or
    when it cannot be used (said once on stderr)."""
    if not os.environ.get(REMOTE_ENV):
        return None
    try:
        return RemoteHook(open_remote())
    except Exception as e:
        _say(f"{REMOTE_ENV} is not used: {getattr(e, 'message', e)}")
        return None
