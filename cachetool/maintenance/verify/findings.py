"""What verify says, as typed values: a `Finding` (a code, which carries its severity, the
sentence shown, about one entry and file, with a hint) and the `VerifyReport`. Everything verify
decides (the exit code, what `--quarantine` moves, how a finding is checked again before a move)
is decided from codes and severities, never from the sentence."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_args

from cachetool.errors import ExitCode


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value


ErrorCode = Literal[  # the entry is broken; `--quarantine` moves it aside
    "damaged",  # the scan found the entry damaged (missing shards, state.json, rows, ...)
    "unreadable-header",  # a file's Arrow headers do not read to the end
    "fingerprint-mismatch",  # the fingerprint inside the file is not the one its name says
    "shard-length",  # a source shard's rows differ from dataset_info.json's shard_lengths
    "index-out-of-bounds",  # an indices file points past the end of its data
    "invalid-data",  # --deep: a buffer does not validate, or datasets cannot load the schema
    "checksum-changed",  # --deep: bytes differ from the checksum recorded earlier (never moved)
    "interrupted-save",  # data-*.arrow without state.json, old enough to be interrupted
    "tf-incomplete",  # a finished tf.data cache misses data its index names
    "stale-code",  # --stale: computed by code that has changed since
]
WarningCode = Literal[  # leftovers and oddities; gc removes them
    "not-regular-file",  # a symlink, FIFO, socket or device in the cache
    "incomplete-download",
    "tf-abandoned",  # a killed tf.data writer's lockfile
    "leftover-temp",  # a temporary file of a killed writer
    "leftover-prepare",  # an interrupted load_dataset preparation
    "recent-save",  # a save in progress or an interrupted one (state.json comes last)
    "stale-lock",  # a lock whose guarded folder is gone and that nobody holds
    "orphan-indices",  # an indices file whose data is gone
    "checksums-not-stored",  # --record could not write its checksums
    "partial-shards",  # a num_proc shard set missing shards (a killed map): datasets reuses the rest
    "not-quarantined",  # --quarantine left a broken file where it is, and why
]
InfoCode = Literal[
    "odd-file",  # anything else the scan says about a file datasets does not write
    "being-written",  # a live process on this host is writing it
    "held-open",  # a temporary file a live process holds open
    "leased",  # a live lease (this host or another) may cover it
    "shards-in-progress",  # a num_proc shard set whose other shards are still being written
    "tf-being-written",
    "record-file-gone",  # a ledger record's file was removed since
    "rewritten",  # --deep: written anew since its checksum was recorded (recorded again)
]
#: What a finding is about. Each code has one severity (`SEVERITY`).
Code = Literal[ErrorCode, WarningCode, InfoCode]

SEVERITY: dict[Code, Severity] = {
    **dict.fromkeys(get_args(ErrorCode), Severity.ERROR),
    **dict.fromkeys(get_args(WarningCode), Severity.WARNING),
    **dict.fromkeys(get_args(InfoCode), Severity.INFO),
}


@dataclass(frozen=True)
class Finding:
    """One thing verify has to say: its code (which decides its severity and everything verify
    does with it), the sentence a person reads, about which entry and file, and what to do."""

    code: Code
    problem: str
    entry: str  # the entry id (fingerprint, or path)
    kind: str  # the entry's kind (`Kind` value), or "record" / "stale" for ledger findings
    path: Path
    hint: str = ""
    #: The file version the finding is about (device, inode, size, mtime ns), taken when it was
    #: read; `quarantine` moves nothing else. None for folders; CHANGED when it changed meanwhile.
    identity: tuple[int, int, int, int] | None = field(default=None, compare=False, repr=False)

    @property
    def severity(self) -> Severity:
        return SEVERITY[self.code]

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity.value,
            "entry": self.entry,
            "kind": self.kind,
            "path": os.fsdecode(self.path),
            "problem": self.problem,
            "hint": self.hint,
        }


#: The identity of a file that changed between the scan and the finding: matches no file.
CHANGED = (0, 0, -1, 0)


@dataclass(frozen=True)
class VerifyReport:
    root: Path
    findings: tuple[Finding, ...]
    entries_checked: int
    files_checked: int
    bytes_checked: int = 0  # bytes read in full (deep)
    deep: bool = False
    recorded: int = 0  # checksums stored (record)
    quarantined: tuple[tuple[Path, Path], ...] = field(default=())
    #: `quarantine=True, dry_run=True`: what would move (nothing moved). None without a dry run.
    would_quarantine: tuple[Path, ...] | None = None
    #: `restore=True`: (from, to) of each file put back before verifying, and what was not.
    restored: tuple[tuple[Path, Path], ...] = field(default=())
    restore_notes: tuple[str, ...] = field(default=())
    #: Warnings fail too (`verify_cache(strict=True)`, `cachetool verify --strict`).
    strict: bool = False

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == Severity.ERROR)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == Severity.WARNING)

    def failed(self, strict: bool | None = None) -> bool:
        """Errors were found, or warnings too when `strict` (by default the report's own)."""
        strict = self.strict if strict is None else strict
        return bool(self.errors) or (strict and bool(self.warnings))

    @property
    def exit_code(self) -> int:
        """What `cachetool verify` exits with: 1 when `failed()`, else 0."""
        return int(ExitCode.PROBLEMS_FOUND) if self.failed() else int(ExitCode.OK)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "version": 1,
            "root": os.fsdecode(self.root),
            "deep": self.deep,
            "entries_checked": self.entries_checked,
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "checksums_recorded": self.recorded,
            "counts": {s.value: sum(f.severity == s for f in self.findings) for s in Severity},
            "findings": [f.to_json() for f in self.findings],
            "quarantined": [{"from": os.fsdecode(a), "to": os.fsdecode(b)} for a, b in self.quarantined],
        }
        if self.would_quarantine is not None:
            doc["would_quarantine"] = [os.fsdecode(p) for p in self.would_quarantine]
        return doc


def rel(path: Path, root: Path) -> str:
    """`path` relative to `root` when inside it, else whole."""
    try:
        return os.fsdecode(path.relative_to(root))
    except ValueError:
        return os.fsdecode(path)
