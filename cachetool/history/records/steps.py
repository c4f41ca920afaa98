"""Step records: a call that made (or named) a dataset state (transform, root, save, checkpoint),
and the marker of a step that began to compute."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cachetool.history.records.base import BadRecord, LedgerRecord
from cachetool.history.records.parts import (
    ArgInfo,
    CallSite,
    ColumnHead,
    Compute,
    FileRecord,
    FunctionInfo,
    RandomFallback,
    Rekeyed,
    Resumed,
    SourceInfo,
)

#: `cache` values of a step record.
_CACHE_VALUES = ("hit", "partial", "miss", "none")
_COMPUTED = ("miss", "partial")


def _cache(v: Any, where: str) -> str:
    if v is None:
        return "none"
    if v not in _CACHE_VALUES:
        raise BadRecord("'cache' is not one of hit, partial, miss, none")
    return str(v)


@dataclass(init=False, repr=False, eq=False)
class StepRecord(LedgerRecord):
    """A call that made (or named) a dataset state: a transform, a root, a save, a checkpoint."""

    OMIT: ClassVar[tuple[str, ...]] = ("no_cache", "columns", "resumed", "rekeyed", "compute", "named_files")
    EXTRA_LAST: ClassVar[bool] = True

    operation: str | None = None
    transform: str | None = None
    result: str | None = None
    parents: tuple[str, ...] = ()
    output: str | None = None
    call_site: CallSite | None = None
    function: FunctionInfo | None = None
    args: Mapping[str, ArgInfo] = field(default_factory=dict)
    random_fallback: RandomFallback | None = None
    fingerprint_given: bool = False
    files: tuple[FileRecord, ...] = ()
    cache: str = field(default="none", metadata={"read": _cache})
    in_memory: bool = False
    split: str | None = None
    source: SourceInfo | None = None
    error: str | None = None
    #: Why the step ran without a persistent cache (it runs again in every run), or None:
    #: one of `cachetool.history.explain.answer.UNCACHED_TEXT`.
    no_cache: str | None = None
    #: Events files, in-memory roots: each column's digest and first values.
    columns: Mapping[str, ColumnHead] = field(default_factory=dict)
    #: A map that reused the complete batches of its killed attempt (`cachetool.trace.resume`).
    resumed: Resumed | None = None
    #: A map whose earlier equivalent result was written under its fingerprint (`trace.rekey`).
    rekeyed: Rekeyed | None = None
    #: A step that computed (miss, partial): its compute time, workers included (None: a hit,
    #: or a record written before the tracer measured it).
    compute: Compute | None = None
    #: A call the user made: the output files the script named (`cache_file_name`,
    #: `indices_cache_file_name`, ... -> absolute path), as it gave them; a source's `cache_dir`.
    named_files: Mapping[str, str] = field(default_factory=dict)

    # -- what readers ask ----------------------------------------------------------------------
    @property
    def uncached(self) -> str | None:
        """Why this step runs again in every run (`no_cache`), or None. Records written
        before the tracer said so count a map or filter of an in-memory dataset."""
        if self.no_cache is not None:
            return self.no_cache
        if self.in_memory and self.cache == "none" and self.operation in ("map", "filter"):
            return "in-memory"
        return None

    @property
    def computed(self) -> bool:
        """The step computed (part of) its result: cache "miss" or "partial"."""
        return self.cache in _COMPUTED

    @property
    def may_go_stale(self) -> bool:
        """Code can change under this step's fingerprint: its function, or a helper of the user's
        it calls, is hashed by `datasets` by name only, or the fingerprint is a random fallback
        that repeats after `random.seed`, or a generator reads files given by name (`SourceInfo.gen_files`).
        Steps without one are never the cause of a stale hit."""
        fn, rf = self.function, self.random_fallback
        gen = self.source is not None and bool(self.source.gen_files)
        return bool(fn and (fn.by_reference or fn.deps)) or bool(rf and rf.predictable) or gen

    @property
    def is_origin(self) -> bool:
        """The record says where `result` comes from: not a save, not a checkpoint, not a no-op
        whose result is its own parent (a map whose function returned None)."""
        return (
            self.result is not None
            and self.type not in ("save", "checkpoint")
            and self.result not in self.parents
        )

    @functools.cached_property  # read twice per record by the ledger's usage
    def made(self) -> tuple[str, ...]:
        """The fingerprints this step's result is known by: `result`, then the fingerprint in the
        name of each cache file it wrote or reused when that differs (`cast_column` writes under
        the fingerprint of the `map` it runs): the ledger's usage files the step under each."""
        if self.result is None:
            return ()
        from cachetool.cache.layout import parse_cache_file  # (its patterns: not for a tracer)

        made = [self.result]
        for f in self.files:
            parsed = parse_cache_file(f.path.rpartition("/")[2])
            if parsed is not None and parsed[0] not in made:
                made.append(parsed[0])
        return tuple(made)

    @property
    def origin_counts(self) -> tuple[int, int, int]:
        """What this record, an origin of its result, adds to the result's usage: hits, misses,
        a random fingerprint (0 or 1)."""
        return int(self.cache == "hit"), int(self.computed), int(self.random_fallback is not None)

    def arg(self, name: str) -> ArgInfo | None:
        """The recorded argument `name`, or None (`datasets` leaves out arguments equal to their
        default)."""
        return self.args.get(name)

    @property
    def file_paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)


class TransformRecord(StepRecord):
    """A transform call (`map`, `filter`, `select`, `concatenate_datasets`, ...)."""

    TYPE: ClassVar[str] = "transform"


class RootRecord(StepRecord):
    """A dataset that starts a chain: a builder split, `load_from_disk` (its parent is the saved
    state's fingerprint), an in-memory dataset. `source` says which."""

    TYPE: ClassVar[str] = "root"


class SaveRecord(StepRecord):
    """`save_to_disk`: the folder `source.path` holds `result`."""

    TYPE: ClassVar[str] = "save"

    @property
    def saved_path(self) -> str | None:
        return self.source.path if self.source else None


class CheckpointRecord(StepRecord):
    """`cachetool.checkpoint(name, obj)` in an events file: `transform` is the name, `result` the
    digest of the object, `args["value"]` its repr (and tree)."""

    TYPE: ClassVar[str] = "checkpoint"


@dataclass(init=False, repr=False, eq=False)
class StepStartRecord(LedgerRecord):
    """A step began to compute: written when it finds no cache file to load (a miss), before it
    writes, so a run killed in the step still says which step it was and where it wrote. The
    step's own record, written when it ends, has the same `run` and `seq`."""

    TYPE: ClassVar[str] = "step-start"

    operation: str | None = None
    parents: tuple[str, ...] = ()
    call_site: CallSite | None = None
    split: str | None = None
    #: The cache files the step is about to write (they do not exist yet).
    paths: tuple[str, ...] = ()
    #: The `tmp*` files already in those folders when the step began (another run's leftovers):
    #: not what this step wrote.
    before: tuple[str, ...] = ()


def site_key(rec: StepRecord, realpaths: dict[str, str] | None = None) -> tuple[object, ...] | None:
    """The same call site: operation, file (its real path, cached in `realpaths`) and line."""
    site = rec.call_site
    if site is None or not site.file:
        return None
    real = realpaths.get(site.file) if realpaths is not None else None
    if real is None:
        real = os.path.realpath(site.file)
        if realpaths is not None:
            realpaths[site.file] = real
    return (rec.operation, real, site.line)


def fn_key(rec: StepRecord) -> tuple[object, ...] | None:
    """The same function: operation, qualified name and file."""
    fn = rec.function
    if fn is None or not fn.qualname:
        return None
    return (rec.operation, fn.qualname, fn.file)


def moved_key(rec: StepRecord) -> tuple[object, ...] | None:
    """The same function moved to another file: operation, name, code and inputs."""
    fn = rec.function
    if fn is None or not fn.qualname or not fn.code_hash:
        return None
    return (rec.operation, fn.qualname, fn.code_hash, tuple(rec.parents))


#: The step types `stats` counts as steps (hits, misses); saves are counted apart.
COUNTED = ("transform", "root")


def written_bytes(rec: StepRecord) -> int:
    """Bytes of the files a record wrote (not those it reused)."""
    return sum(f.size or 0 for f in rec.files if f.status == "written")


def step_counts(steps: list[StepRecord]) -> dict[str, Any]:
    """What `stats` counts of some steps, as a run's summary holds it too: steps, hits, misses
    (partial ones included), partial, no file (looked nothing up and wrote nothing, failed steps
    apart), failed, the seconds of the misses and the bytes written."""
    misses = [r for r in steps if r.computed]
    return {
        "steps": len(steps),
        "hits": sum(r.cache == "hit" for r in steps),
        "misses": len(misses),
        "partial": sum(r.cache == "partial" for r in misses),
        "no_file": sum(r.cache not in ("hit", "miss", "partial") and r.error is None for r in steps),
        "failed": sum(r.error is not None for r in steps),
        "miss_seconds": sum(r.duration for r in misses),
        "bytes_written": sum(written_bytes(r) for r in steps),
    }


def source_hashes(rec: StepRecord) -> list[str]:
    """The source hashes of the function a step record names and of the helpers it calls."""
    fn = rec.function
    if fn is None:
        return []
    return [h for h in (fn.source_hash, *(d.source_hash for d in fn.deps)) if h]
