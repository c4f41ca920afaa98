"""The producer record of one result (`<fp>/record.json`), written after the files it names (name,
size, xxh3), HMAC-signed with a key; a reader trusts nothing in it it has not checked.
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
from cachetool.remote.client import KEY_ENV, RemoteRefused
from cachetool.safejson import json_fields

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
        return json_fields(self)


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
            raise refuse(f"unsigned, and {KEY_ENV} is set")
        if not hmac.compare_digest(signature, _sign(doc, key)):
            raise refuse(f"its signature does not match {KEY_ENV}")
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
    return Record(fingerprint, folder, tuple(files))


def _sign(doc: dict[str, Any], key: bytes) -> str:
    body = {k: v for k, v in doc.items() if k != "signature"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container)
        return "?"
