"""`--shard i/n`: the share of a cache one of n processes lists or verifies (`ls`, `verify`), so
`cachetool merge` can join the results. An entry's place is a pure function of what names it (its
fingerprint, else its path relative to the root): `position`; docs/fleet.md gives the rule.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cachetool.cache.model import CacheReport, Entry
from cachetool.errors import CachetoolError

_HEX8 = re.compile(r"[0-9a-f]{8}")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (counted from 0, as SLURM array and Kubernetes job indices are)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def to_json(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}

    def holds(self, fingerprint: str | None, path: str | os.PathLike[str], root: Path) -> bool:
        """Whether the thing named by `fingerprint` (else by `path`, under `root`) is in this shard."""
        return position(fingerprint, path, root) * self.count >> 32 == self.index

    def holds_entry(self, entry: Entry, root: Path) -> bool:
        """Whether `entry` of the cache at `root` is in this shard."""
        return self.holds(entry.fingerprint, entry.path, root)


def parse_shard(value: Shard | tuple[int, int] | str | None) -> Shard | None:
    """`--shard`'s value (`"2/8"`, or `(2, 8)` from Python) as a `Shard`; None stays None. Anything
    but an index from 0 to n-1 of n ≥ 1 shards raises `CachetoolError` (exit 2), one line."""
    if value is None or isinstance(value, Shard):
        return value
    text = "/".join(map(str, value)) if isinstance(value, tuple) else str(value)
    index, slash, count = text.strip().partition("/")
    why = ""
    if not (slash and index.isascii() and index.isdigit() and count.isascii() and count.isdigit()):
        why = "give I/N, two whole numbers"
    elif int(count) < 1:
        why = "N, the number of shards, is at least 1"
    elif int(index) >= int(count):
        why = f"I counts from 0: with {int(count)} shard(s) it is 0 to {int(count) - 1}"
    if why:
        raise CachetoolError(f"invalid --shard '{text}': {why} (shard I of N; shard=(i, n) in Python)")
    return Shard(int(index), int(count))


def position(fingerprint: str | None, path: str | os.PathLike[str], root: Path) -> int:
    """Where a thing falls among shards, 0 to 2³²-1 (the module's docstring says how)."""
    if fingerprint and _HEX8.match(fingerprint):
        return int(fingerprint[:8], 16)
    if fingerprint:
        key = os.fsencode(fingerprint)
    else:  # string work, not `Path.relative_to`: a listing may hold 100,000 leftovers
        text, top = os.fsdecode(path), os.fsdecode(root).rstrip("/") + "/"
        key = os.fsencode(text[len(top) :] if text.startswith(top) else text)  # outside: whole
    import hashlib

    return int(hashlib.sha256(key).hexdigest()[:8], 16)


def shard_report(report: CacheReport, shard: Shard | None) -> CacheReport:
    """`report` cut to what `shard` holds: its entries, the dataset folders (whose metadata files
    the totals count) and the warnings; the n shards of a report together hold each exactly once."""
    if shard is None or shard.count == 1:
        return report
    root = report.root
    return replace(
        report,
        entries=tuple(e for e in report.entries if shard.holds_entry(e, root)),
        datasets=tuple(d for d in report.datasets if shard.holds(None, d.path, root)),
        warnings=tuple(w for w in report.warnings if shard.holds(None, w.path, root)),
    )


def fleet_fields(shard: Shard | None) -> dict[str, Any]:
    """What a `--json` document says of where it comes from, so `cachetool merge` can tell hosts and
    shards apart: `host` (this machine's name, as `socket.gethostname()` says it: without importing
    `socket`) and `shard` (`{"index": i, "count": n}`, or null)."""
    return {"host": os.uname().nodename, "shard": None if shard is None else shard.to_json()}
