"""Records of a compacted ledger (`cachetool.history.compact`): the marker naming the segments a
compacted segment replaces, and the summary of one run whose records were folded into it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cachetool.history.records.base import BadRecord, LedgerRecord, _field, _is_dict

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


@dataclass(frozen=True, kw_only=True)
class CompactionRecord(LedgerRecord):
    """The first record of a compacted segment: the segments (name and size when read) whose
    records it holds, kept or summarised. Readers skip a segment named here while it still has
    that size (a compaction killed before removing it)."""

    TYPE: ClassVar[str] = "compaction"

    replaces: tuple[tuple[str, int], ...] = field(default=(), metadata={"read": _replaces})


@dataclass(frozen=True, kw_only=True)
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
        *("runs", "steps", "hits", "misses", "partial", "no_file", "saves", "bytes_written", "other"),
    )

    argv: tuple[str, ...] = ()
    runs: int = 1
    steps: int = 0
    hits: int = 0
    misses: int = 0
    partial: int = 0
    no_file: int = 0
    saves: int = 0
    bytes_written: int = 0
    other: int = 0
    miss_seconds: float = 0.0
    fps: Mapping[str, FpSums] = field(default_factory=dict, metadata={"read": _fps})
