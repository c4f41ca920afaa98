"""Records that are not steps: run markers (a traced process started or ended), the source text
of a user function, an item gc removed, and those of a compacted ledger (`cachetool.history.compact`:
the marker naming the segments a compacted segment replaces, and the summary of one run whose
records were folded into it)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from cachetool.history.records.base import BadRecord, LedgerRecord, _field, _is_dict

if TYPE_CHECKING:
    from cachetool.history.records.steps import StepRecord

#: The name of a compacted segment starts with this (`cachetool.history.compact`).
COMPACTED_PREFIX = "compacted-"


@dataclass(init=False, repr=False, eq=False)
class RunStartRecord(LedgerRecord):
    """A traced process started (written when the tracer is installed, to its cache root's ledger):
    a run with this record and no `RunEndRecord` ended without closing (killed, or still running)."""

    TYPE: ClassVar[str] = "run-start"

    argv: tuple[str, ...] = ()
    cwd: str | None = None


@dataclass(init=False, repr=False, eq=False)
class RunEndRecord(LedgerRecord):
    """A traced process ended without being killed (an uncaught exception included), or stopped
    tracing; written to every root the run wrote to, with how it ended when `cachetool run` ran
    it (None: not known, as in records of older versions)."""

    TYPE: ClassVar[str] = "run-end"
    OMIT: ClassVar[tuple[str, ...]] = ("status", "exception", "message", "step")

    #: The exit status the script ended with (1 for an uncaught exception).
    status: int | None = None
    #: The uncaught exception that ended the run: its type's name and its message.
    exception: str | None = None
    message: str | None = None
    #: The `seq` of the step the exception came out of (None: outside any step).
    step: int | None = None


@dataclass(init=False, repr=False, eq=False)
class SourceRecord(LedgerRecord):
    """The text of a user function named by a step's `function` (or one of its `deps`)."""

    TYPE: ClassVar[str] = "source"

    hash: str | None = None
    qualname: str | None = None
    file: str | None = None
    line: int | None = None
    text: str | None = None
    truncated: bool = False


@dataclass(init=False, repr=False, eq=False)
class GcRecord(LedgerRecord):
    """One item `cachetool gc` removed (`action` "removed"), or `cachetool verify --quarantine`
    moved aside ("quarantined", to `moved_to`). `files` is a count here (a step's `files` is a
    list)."""

    TYPE: ClassVar[str] = "gc"
    EXTRA_LAST: ClassVar[bool] = True

    action: str = "removed"
    fingerprint: str | None = None
    aliases: tuple[str, ...] = ()
    kind: str | None = None
    path: str | None = None
    paths: tuple[str, ...] = ()
    size: int = 0
    files: int = 0
    reason: str | None = None
    dataset: str | None = None
    moved_to: tuple[str, ...] = ()

    def said(self, when: str) -> str:
        """How the files went, `when` being the record's time as the caller writes it."""
        if self.action == "quarantined":
            to = f", moved to {self.moved_to[0]}" if self.moved_to else ""
            return f"quarantined by cachetool verify at {when} ({self.reason or 'damaged'}{to})"
        return f"removed by cachetool gc at {when}" + (f" ({self.reason})" if self.reason else "")

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """The removed entry's fingerprint and aliases."""
        return ((self.fingerprint,) if self.fingerprint else ()) + self.aliases


#: Per fingerprint in a summary: [last use, origin records, hits, misses, random (0/1)].
FpSums = tuple[float, int, int, int, int]


def _replaces(raw: Any, where: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(raw, list) or not all(
        isinstance(x, list)
        and len(x) == 2
        and isinstance(x[0], str)
        and isinstance(x[1], int)
        and not isinstance(x[1], bool)
        for x in raw
    ):
        raise BadRecord("'replaces' is not a list of [name, size]")
    from cachetool.cache.roots import is_segment_name

    for name, _ in raw:
        if not is_segment_name(name):
            raise BadRecord(f"'replaces' names {name[:80]!r}, not a segment of its folder")
    return tuple((str(n), int(s)) for n, s in raw)


def _sums(raw: dict[str, Any], where: str) -> dict[str, FpSums]:
    for fp, v in raw.items():
        if not (
            isinstance(v, list) and len(v) == 5 and all(map(_is_number, v)) and all(map(_is_count, v[1:]))
        ):
            raise BadRecord(f"'fps.{fp[:40]}' is not [last, records, hits, misses, random]")
    return {str(fp): (float(v[0]), int(v[1]), int(v[2]), int(v[3]), int(v[4])) for fp, v in raw.items()}


def _is_number(x: Any) -> bool:
    """A finite number (JSON's `NaN` and `Infinity` are read by `json.loads`)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_count(x: Any) -> bool:
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())


_fps = _field("fps", dict, _is_dict, "an object", _sums)


@dataclass(init=False, repr=False, eq=False)
class CompactionRecord(LedgerRecord):
    """The first record of a compacted segment: the segments (name and size when read) whose
    records it holds, kept or summarised. Readers skip a segment named here while it still has
    that size (a compaction killed before removing it)."""

    TYPE: ClassVar[str] = "compaction"

    replaces: tuple[tuple[str, int], ...] = field(default=(), metadata={"read": _replaces})


@dataclass(init=False, repr=False, eq=False)
class RunSummaryRecord(LedgerRecord):
    """Runs whose records a compaction folded away (`internal` ones left out): one run, or
    (`runs` > 1) the oldest ones merged. `time` is the first start, `duration` up to the last end;
    the script (`argv`, of one run), step counts as `stats` makes them, the bytes written, and
    per fingerprint that still had files when it was compacted (`fps`) what the ledger's usage
    needs: last use (as a result or a parent), origin records, hits, misses, a random
    fingerprint. `other` counts the origins of fingerprints without files (not kept)."""

    TYPE: ClassVar[str] = "run-summary"
    #: The counts a merge of summaries adds up.
    _COUNTS: ClassVar[tuple[str, ...]] = (
        *("runs", "steps", "hits", "misses", "partial", "no_file", "failed", "saves", "bytes_written"),
        "other",
    )

    argv: tuple[str, ...] = ()
    runs: int = 1
    steps: int = 0
    hits: int = 0
    misses: int = 0
    partial: int = 0
    no_file: int = 0
    failed: int = 0
    saves: int = 0
    bytes_written: int = 0
    other: int = 0
    miss_seconds: float = 0.0
    fps: Mapping[str, FpSums] = field(default_factory=dict, metadata={"read": _fps})


def add_sums(a: FpSums | None, b: FpSums) -> FpSums:
    """Two tallies of one fingerprint as one: the later use, the counts added, random if either."""
    if a is None:
        return b
    return (max(a[0], b[0]), a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] | b[4])


def step_sums(rec: StepRecord) -> Iterator[tuple[str, FpSums]]:
    """What one step adds to the usage of each fingerprint it names: its end, a use of what it
    made and of its parents; an origin (`is_origin`), one record with its hit, miss and random
    fingerprint for each fingerprint it made."""
    end = rec.end
    used: FpSums = (end, 0, 0, 0, 0)
    made = (end, 1, *rec.origin_counts) if rec.is_origin else used
    for fp in rec.made:
        yield fp, made
    for fp in rec.parents:
        yield fp, used
