"""The producer record of one result on the remote (`<fp>/record.json`), written after every file
it names: each file's name, size and xxh3, where the files live in a cache root, and who made
them (versions, host, user, time, call site). With a key it carries an HMAC-SHA256 of everything
else in it; a reader with a key uses no record whose signature is missing or wrong.

A reader trusts nothing in a record it has not checked: every file name must be a cache file of
the record's fingerprint (no path), the folder a relative path inside a cache root.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import json
import socket
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from cachetool.cache.layout import parse_cache_file
from cachetool.remote.client import RemoteRefused

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

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "xxh3": self.xxh3}


@dataclass(frozen=True)
class Record:
    """A checked producer record: `fields` is the whole document as written."""

    fingerprint: str
    folder: str  # where the files live, relative to a cache root (posix)
    files: tuple[RemoteFile, ...]
    fields: dict[str, Any]
    signed: bool

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


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
        "files": [f.to_json() for f in files],
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

    if len(data) > MAX_RECORD_BYTES:
        raise refuse(f"larger than {MAX_RECORD_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise refuse("not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise refuse("not a cachetool record")
    signature = doc.get("signature")
    if key is not None:
        if not isinstance(signature, str):
            raise refuse(f"unsigned, and {_key_env()} is set")
        if not hmac.compare_digest(signature, _sign(doc, key)):
            raise refuse(f"its signature does not match {_key_env()}")
    if doc.get("fingerprint") != fingerprint:
        raise refuse(f"it names another fingerprint ({str(doc.get('fingerprint'))[:70]})")
    folder = doc.get("folder")
    parts = PurePosixPath(folder).parts if isinstance(folder, str) else ("..",)
    if not isinstance(folder, str) or folder.startswith("/") or ".." in parts or "\\" in folder:
        raise refuse("its folder is not a relative path inside a cache root")
    files = []
    raw = doc.get("files")
    for f in raw if isinstance(raw, list) and raw else [None]:
        if not (
            isinstance(f, dict)
            and isinstance(f.get("name"), str)
            and isinstance(f.get("size"), int)
            and isinstance(f.get("xxh3"), str)
        ):
            raise refuse("its list of files is malformed")
        parsed = parse_cache_file(f["name"])
        if parsed is None or parsed[0] != fingerprint or "/" in f["name"]:
            raise refuse(f"{f['name'][:80]!r} is not a cache file of {fingerprint}")
        files.append(RemoteFile(f["name"], f["size"], f["xxh3"]))
    return Record(fingerprint, folder, tuple(files), doc, isinstance(signature, str))


def _sign(doc: dict[str, Any], key: bytes) -> str:
    body = {k: v for k, v in doc.items() if k != "signature"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def _key_env() -> str:
    from cachetool.remote.client import KEY_ENV

    return KEY_ENV


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container)
        return "?"
