"""Why was a step recomputed, and was a cache hit computed by code that has changed since?

`datasets` recomputes a step when its fingerprint is new, and a fingerprint is a hash of the parent
fingerprint, the transform and its arguments. The ledger records, per step, each argument's
digest and (for steps that computed their result) a bounded summary of its hash tree, plus the
source of the user's function and of the helpers it calls. So a recorded step can be compared
with its *siblings* — earlier records of the same call site (or function) with another
fingerprint — and the difference named:

========================  ==================================================================
kind                      meaning
========================  ==================================================================
``argument``              an argument's value changed (``fn_kwargs['threshold']`` 0.5 → 0.6)
``function``              another function was passed
``function-source``       the function's code changed (with the lines)
``source-file``           the same function from another file (the script renamed or moved)
``nondeterministic``      the same code pickles differently in every process (a frozenset,
                          an address): not a change of the user's
``non-semantic``          only arguments that do not change the result (``writer_batch_size``)
``random``                `datasets` could not hash an argument and used a random fingerprint
``fingerprint-given``     the caller passed another ``new_fingerprint=``
``source``                the source dataset changed (an input file was modified)
``input``                 the input changed upstream and no recorded step says why
``versions``              `datasets` hashes the step differently (another release)
``same-fingerprint``      the fingerprint is not new: the cache file was gone (removed by gc, deleted, or
                          ``load_from_cache_file=False``)
``concurrent``            another run (on this or another host) was computing the same
                          fingerprint at the same time: neither could reuse the other's file
``first-run``             nothing to compare with
``unexplained``           no recorded argument differs
========================  ==================================================================

A change upstream is reported with the step where it happened (`Reason.upstream`).

*Stale hits* are the opposite failure: a function imported from the user's own module is pickled
by reference, so editing it keeps the fingerprint and `datasets` reuses the old result.
`stale_hits(root)` finds cache entries whose computing code (the function, or a helper it calls)
changed since — by a later recorded run, or in the source file on disk now.
"""

from __future__ import annotations

import ast
import difflib
import io
import itertools
import os
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cachetool.errors import AmbiguousFingerprint, CachetoolError, UnknownFingerprint
from cachetool.lineage.ledger import Ledger
from cachetool.lineage.records import (
    ArgInfo,
    FunctionInfo,
    FunctionRef,
    GcRecord,
    LedgerRecord,
    RandomFallback,
    RootRecord,
    SourceRecord,
    StepRecord,
    TransformRecord,
)
from cachetool.lineage.runs import Interruption, interruption

__all__ = [
    "ExplainReport",
    "LedgerView",
    "LineChange",
    "Reason",
    "SourceChange",
    "StaleHit",
    "StepExplanation",
    "explain_fingerprint",
    "explain_run",
    "load_view",
    "stale_hits",
]

#: Arguments `datasets` hashes that do not change the data a step produces.
NON_SEMANTIC = frozenset(
    {
        "writer_batch_size",
        "keep_in_memory",
        "num_proc",
        "desc",
        "load_from_cache_file",
        "cache_file_name",
        "indices_cache_file_name",
        "train_indices_cache_file_name",
        "test_indices_cache_file_name",
        "suffix_template",
    }
)
#: Culprit kinds (`cachetool.fingerprint.diff.hint_for`) that vary from process to process.
NONDETERMINISTIC_KINDS = frozenset(
    {"set-order", "order", "address", "uuid", "temp-path", "timestamp", "random-state"}
)
_COMPUTED = ("miss", "partial")
_MAX_UPSTREAM = 50
_MAX_LINES = 6


class NoRecords(CachetoolError):
    """The ledger has nothing to explain (no pipeline ran under `cachetool run`)."""

    def __init__(self, root: Path, what: str) -> None:
        super().__init__(f"no recorded {what} in {root}: run the pipeline with `cachetool run script.py`")
        self.root = root


# ------------------------------------------------------------------------------------------
# The answer
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LineChange:
    """One changed line of a function: its number in the newer source (or the older one, for a
    removed line) and the text before and after (None: added or removed)."""

    line: int
    before: str | None
    after: str | None

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "before": self.before, "after": self.after}

    def __str__(self) -> str:
        if self.before is None:
            return f"line {self.line}: added `{self.after}`"
        if self.after is None:
            return f"line {self.line}: removed `{self.before}`"
        return f"line {self.line}: `{self.before}` → `{self.after}`"


@dataclass(frozen=True)
class StepRef:
    """A recorded step, as a person recognises it."""

    fingerprint: str | None
    operation: str | None
    function: str | None
    file: str | None
    line: int | None
    time: float | None
    run: str | None
    host: str | None = None

    @classmethod
    def of(cls, rec: StepRecord) -> StepRef:
        fn = rec.function
        site = rec.call_site
        return cls(
            fingerprint=rec.result,
            operation=rec.operation,
            function=fn.qualname if fn and fn.qualname else None,
            file=site.file if site and site.file else None,
            line=site.line if site else None,
            time=rec.time,
            run=rec.run or None,
            host=rec.host,
        )

    @property
    def label(self) -> str:
        """`filter keep @ pipeline.py:24`."""
        parts = [self.operation or "step"]
        if self.function:
            parts.append(self.function)
        text = " ".join(parts)
        if self.file:
            text += f" @ {os.path.basename(self.file)}:{self.line}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "operation": self.operation,
            "function": self.function,
            "call_site": {"file": self.file, "line": self.line},
            "time": self.time,
            "run": self.run,
            "host": self.host,
        }


@dataclass(frozen=True)
class Reason:
    """One thing that differs between a step and the sibling it is compared with."""

    kind: str
    #: One sentence for a person, without the upstream prefix.
    message: str
    argument: str | None = None
    #: The access path of the part that changed (``fn_kwargs['threshold']``,
    #: ``function → code → const[3]``), when known.
    path: str | None = None
    before: str | None = None
    after: str | None = None
    lines: tuple[LineChange, ...] = ()
    hint: str | None = None
    #: Set when the change happened in an earlier step: that step.
    upstream: StepRef | None = None

    @property
    def text(self) -> str:
        if self.upstream is None:
            return self.message
        return f"its input changed: {self.upstream.label} was recomputed because {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.text,
            "argument": self.argument,
            "path": self.path,
            "before": self.before,
            "after": self.after,
            "lines": [c.to_json() for c in self.lines],
            "hint": self.hint,
            "upstream": self.upstream.to_json() if self.upstream else None,
        }


@dataclass(frozen=True)
class SourceChange:
    """A function whose code changed between the computation of a result and a later moment."""

    qualname: str
    file: str | None
    lines: tuple[LineChange, ...]

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1] if self.file else self.qualname

    def to_json(self) -> dict[str, Any]:
        return {"qualname": self.qualname, "file": self.file, "lines": [c.to_json() for c in self.lines]}


@dataclass(frozen=True)
class StaleHit:
    """A cache entry computed by code that has changed since: `datasets` reuses it (or did)."""

    fingerprint: str
    files: tuple[str, ...]
    computed_at: float | None
    computed_run: str | None
    #: When a later run reused it (None: found by reading the source files now).
    reused_at: float | None
    reused_run: str | None
    changes: tuple[SourceChange, ...]
    step: StepRef
    #: The cache root it was found in (so the hint names it).
    root: str | None = field(default=None, compare=False)

    @property
    def file_name(self) -> str:
        return os.path.basename(self.files[0]) if self.files else f"cache-{self.fingerprint}"

    @property
    def gc_command(self) -> str:
        """The command that removes this entry now (min-age 0: it was just found stale)."""
        from cachetool.maintenance.hints import gc_command

        if self.root is None:
            return f"cachetool gc {self.fingerprint} --min-age 0"
        return gc_command(self.root, self.fingerprint)

    @property
    def message(self) -> str:
        names = ", ".join(
            f"`{c.name}` in {os.path.basename(c.file)}" if c.file else f"`{c.name}`" for c in self.changes
        )
        first = next((c.lines[0] for c in self.changes if c.lines), None)
        tail = f" ({first})" if first is not None else ""
        if self.reused_at is not None:
            return (
                f"cache entry {self.file_name} was reused at {_clock(self.reused_at)}, but {names} "
                f"changed since it was computed{tail}"
            )
        return (
            f"cache entry {self.file_name} was computed before {names} changed{tail}; the next run "
            "will reuse it"
        )

    @property
    def hint(self) -> str:
        return (
            "datasets hashes functions from your own modules by name, not by code: pass "
            "new_fingerprint= (or a version argument) to the step, or delete the entry "
            f"(`{self.gc_command}`)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "files": list(self.files),
            "computed_at": self.computed_at,
            "computed_run": self.computed_run,
            "reused_at": self.reused_at,
            "reused_run": self.reused_run,
            "changes": [c.to_json() for c in self.changes],
            "step": self.step.to_json(),
            "message": self.message,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class StepExplanation:
    """Why one recorded step computed its result rather than loading it (or that it loaded it)."""

    step: StepRef
    cache: str | None
    duration: float | None
    #: "computed", "loaded", "partial" (some num_proc shards reused) or "no file".
    status: str
    reasons: tuple[Reason, ...]
    #: The sibling the reasons come from.
    compared_with: StepRef | None
    #: Earlier siblings, most recent first, each with what differs from the one before it.
    history: tuple[tuple[StepRef, tuple[Reason, ...]], ...] = ()
    stale: tuple[StaleHit, ...] = ()

    @property
    def summary(self) -> str:
        if not self.reasons:
            return "loaded from the cache" if self.status == "loaded" else self.status
        return "; ".join(r.text for r in self.reasons)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.step.to_json(),
            "cache": self.cache,
            "duration": self.duration,
            "status": self.status,
            "reasons": [r.to_json() for r in self.reasons],
            "compared_with": self.compared_with.to_json() if self.compared_with else None,
            "history": [
                {"step": ref.to_json(), "reasons": [r.to_json() for r in reasons]}
                for ref, reasons in self.history
            ],
            "stale": [s.to_json() for s in self.stale],
        }


#: What each reason for running without a persistent cache reads as, and how to make the step
#: reusable across runs.
UNCACHED_TEXT = {
    "in-memory": "in memory (Dataset.from_dict, from_pandas, from_list, or a dataset with no cache files)",
    "keep-in-memory": "keep_in_memory=True",
    "caching-disabled": "datasets.disable_caching() (results go to a temp folder deleted at exit)",
    "load-from-cache-file-false": "load_from_cache_file=False (computed again over its cache file)",
}
UNCACHED_HINT = (
    "To reuse them across runs: save_to_disk the dataset they start from and load_from_disk it "
    "(its maps and filters are then cached next to it), or pass cache_file_name= to map/filter; "
    "drop keep_in_memory=True, load_from_cache_file=False or disable_caching() where you did not mean them."
)


@dataclass(frozen=True)
class UncachedStep:
    """A step of the run that ran without a persistent cache: it runs again in every run."""

    step: StepRef
    reason: str  # one of records.UNCACHED_REASONS
    duration: float

    @property
    def reason_text(self) -> str:
        return UNCACHED_TEXT.get(self.reason, self.reason)

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step.to_json(), "reason": self.reason, "duration": self.duration}


@dataclass(frozen=True)
class ExplainReport:
    """The answer of `cachetool explain`: one fingerprint, or every computed step of a run."""

    root: Path
    mode: str  # "fingerprint" | "run"
    steps: tuple[StepExplanation, ...]
    run: str | None = None
    run_time: float | None = None
    loaded: int = 0
    stale: tuple[StaleHit, ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)
    #: Steps of the run that ran without a persistent cache (mode "run").
    uncached: tuple[UncachedStep, ...] = ()
    #: The run ended without closing: killed (or still running), in which step (mode "run").
    interrupted: Interruption | None = None

    @property
    def uncached_seconds(self) -> float:
        return sum(u.duration for u in self.uncached)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "root": str(self.root),
            "mode": self.mode,
            "run": self.run,
            "run_time": self.run_time,
            "computed": sum(s.status in ("computed", "partial") for s in self.steps),
            "loaded": self.loaded,
            "steps": [s.to_json() for s in self.steps],
            "stale": [s.to_json() for s in self.stale],
            "uncached": [u.to_json() for u in self.uncached],
            "uncached_seconds": round(self.uncached_seconds, 6),
            "uncached_hint": UNCACHED_HINT if self.uncached else None,
            "interrupted": self.interrupted.to_json() if self.interrupted else None,
        }


# ------------------------------------------------------------------------------------------
# The records, indexed
# ------------------------------------------------------------------------------------------


class LedgerView:
    """The records of a root (and of the roots its lineage reaches), indexed for comparisons."""

    def __init__(
        self,
        root: Path,
        records: Iterable[LedgerRecord],
        warnings: Sequence[str] = (),
        ledger: Ledger | None = None,
        *,
        all_roots: bool = False,
    ) -> None:
        self.root = root
        self.ledger = ledger
        self.all_roots = all_roots  # records of other roots count as this root's
        self.warnings = tuple(warnings)
        self.sources: dict[str, str] = {}
        self.steps: list[StepRecord] = []
        self.by_result: dict[str, list[StepRecord]] = {}
        for rec in records:
            if isinstance(rec, SourceRecord):
                if rec.hash is not None and rec.text is not None:
                    self.sources.setdefault(rec.hash, rec.text)
                continue
            if rec.internal or not isinstance(rec, (TransformRecord, RootRecord)):
                continue
            self.steps.append(rec)
            if rec.result is not None:
                self.by_result.setdefault(rec.result, []).append(rec)

    def own(self, rec: StepRecord) -> bool:
        """The record was read from this root's ledger (not followed into another root)."""
        return self.all_roots or rec.read_from is None or Path(rec.read_from) == self.root

    def first_run(self, rec: StepRecord) -> bool:
        """No run of this root was recorded before `rec`'s run: the cache started empty."""
        return not any(self.own(r) and r.run != rec.run and r.time < rec.time for r in self.steps)

    def origin(self, fp: str, before: float | None = None) -> StepRecord | None:
        """The latest record that made `fp` (before `before`, when given)."""
        best = None
        for rec in self.by_result.get(fp, ()):
            if fp in rec.parents:
                continue
            if before is not None and rec.time > before:
                continue
            best = rec
        return best

    def computing(self, fp: str, before: float | None = None) -> StepRecord | None:
        """The latest record that computed `fp`'s file (a miss), before `before` when given."""
        best = None
        for rec in self.by_result.get(fp, ()):
            if rec.computed and (before is None or rec.time < before):
                best = rec
        return best

    def siblings(self, rec: StepRecord) -> list[StepRecord]:
        """Earlier records of the same step (call site, else function) with another fingerprint,
        one per fingerprint, most recent first; those with the same parents come first. Only
        records of this root count: another cache's runs say nothing about what this one holds."""
        t = rec.time
        key_site = _site_key(rec)
        key_fn = _fn_key(rec)
        key_moved = _moved_key(rec)
        fp = rec.result
        same_site: list[StepRecord] = []
        same_fn: list[StepRecord] = []
        moved: list[StepRecord] = []
        for other in self.steps:
            if other is rec or other.time >= t or other.result == fp or other.run == rec.run:
                continue
            if other.type != rec.type or other.output != rec.output or not self.own(other):
                continue
            if key_site is not None and _site_key(other) == key_site:
                same_site.append(other)
            elif key_fn is not None and _fn_key(other) == key_fn:
                same_fn.append(other)
            elif key_moved is not None and _moved_key(other) == key_moved:
                moved.append(other)
        # The same function (same code) from another file: the script was renamed or moved.
        found = same_site or same_fn or moved
        found.sort(key=lambda r: r.time, reverse=True)
        parents = rec.parents
        out: list[StepRecord] = []
        seen: set[str | None] = set()
        for other in [r for r in found if r.parents == parents] + [r for r in found if r.parents != parents]:
            if other.result not in seen:
                seen.add(other.result)
                out.append(other)
        return out

    def earlier_same(self, rec: StepRecord) -> StepRecord | None:
        """The latest earlier record of this root of the same fingerprint made the same way."""
        best = None
        for other in self.by_result.get(str(rec.result), ()):
            if other is rec or other.time >= rec.time or other.run == rec.run or not self.own(other):
                continue
            if other.parents == rec.parents:
                best = other
        return best

    def with_summaries(self, rec: StepRecord) -> StepRecord:
        """`rec`, or an earlier record of the same fingerprint that holds argument summaries (a hit
        records none; the computation it reused does)."""
        if _has_summaries(rec):
            return rec
        for other in reversed(self.by_result.get(str(rec.result), ())):
            if _has_summaries(other) and other.parents == rec.parents:
                return other
        return rec


def load_view(root: str | os.PathLike[str] | Ledger, *, all_roots: bool = False) -> LedgerView:
    """The ledger of `root` (a loaded `Ledger`, or a root to load), indexed: its own records, plus
    the origins of inputs recorded in other roots (every known root with `all_roots`)."""
    ledger = root if isinstance(root, Ledger) else Ledger.load(root, all_roots=all_roots)
    return LedgerView(ledger.root, ledger.records, ledger.warnings, ledger, all_roots=all_roots)


def _line(item: FunctionRef) -> int:
    return item.line if item.line is not None else 1


def _site_key(rec: StepRecord) -> tuple[Any, ...] | None:
    site = rec.call_site
    if site is None or not site.file:
        return None
    return (rec.operation, os.path.realpath(site.file), site.line)


def _fn_key(rec: StepRecord) -> tuple[Any, ...] | None:
    fn = rec.function
    if fn is None or not fn.qualname:
        return None
    return (rec.operation, fn.qualname, fn.file)


def _moved_key(rec: StepRecord) -> tuple[Any, ...] | None:
    fn = rec.function
    if fn is None or not fn.qualname or not fn.code_hash:
        return None
    return (rec.operation, fn.qualname, fn.code_hash, tuple(rec.parents))


def _has_summaries(rec: StepRecord) -> bool:
    return any(a.summary is not None for a in rec.args.values())


# ------------------------------------------------------------------------------------------
# Comparing two records of one step
# ------------------------------------------------------------------------------------------


def compare(view: LedgerView, new: StepRecord, old: StepRecord, depth: int = 0) -> list[Reason]:
    """What differs between two records of the same step, `old` computed before `new`."""
    new_s, old_s = view.with_summaries(new), view.with_summaries(old)
    rf = new.random_fallback or old.random_fallback
    if rf is not None:
        return [_random_reason(new_s if new.random_fallback else old_s, rf, earlier=not new.random_fallback)]
    if new.type == "root":
        return _source_reasons(view, new, old, depth)
    reasons: list[Reason] = []
    if new.fingerprint_given or old.fingerprint_given:
        a, b = _given(old), _given(new)
        return [
            Reason(
                "fingerprint-given",
                f"new_fingerprint= changed {a} → {b}",
                argument="new_fingerprint",
                before=a,
                after=b,
            )
        ]
    if new.parents != old.parents:
        reasons.extend(_input_reasons(view, new, old, depth))
    if new.transform != old.transform:
        reasons.append(_versions_reason(new, old))
    reasons.extend(_argument_reasons(view, new_s, old_s))
    if not reasons:
        reasons.append(
            Reason(
                "unexplained",
                "no recorded argument differs (the fingerprints were made from something cachetool "
                "does not see)",
            )
        )
    return reasons


def _given(rec: StepRecord) -> str:
    if rec.fingerprint_given:
        return str(rec.result)
    return f"(hashed: {rec.result})"


def _random_reason(rec: StepRecord, rf: RandomFallback, earlier: bool) -> Reason:
    from cachetool.fingerprint.diff import find_unpicklable_in_tree, render_path

    argument = rf.argument
    error = rf.error
    error_type = rf.error_type
    err = f"{error_type}: {error}" if error_type and error else str(error or error_type or "unknown error")
    path = argument
    what = f"`{argument}`" if argument else "the transform"
    arg = rec.args.get(argument) if argument else None
    summary = arg.summary if arg is not None else None
    if summary is not None:
        found = find_unpicklable_in_tree(str(argument), dict(summary))
        if found is not None:
            path = render_path(str(argument), found.path)
            what = f"`{path}` ({found.description})"
    if earlier:
        message = f"the earlier run used a random fingerprint ({what} could not be hashed: {err})"
    else:
        message = f"datasets used a random fingerprint: {what} cannot be hashed ({err})"
    hint = (
        "a random fingerprint is new in every run, so the step is always recomputed: make the "
        "argument picklable (create it inside the function), or pass new_fingerprint="
    )
    return Reason("random", message, argument=argument, path=path, hint=hint)


def _versions_reason(new: StepRecord, old: StepRecord) -> Reason:
    va = old.version("datasets")
    vb = new.version("datasets")
    extra = f" (datasets {va} → {vb})" if va != vb else ""
    return Reason(
        "versions",
        f"datasets hashes this step differently now: {old.transform} → {new.transform}{extra}",
        before=str(old.transform),
        after=str(new.transform),
    )


def _input_reasons(view: LedgerView, new: StepRecord, old: StepRecord, depth: int) -> list[Reason]:
    """The parent fingerprints differ: explain the parent against the old parent, upstream."""
    new_parents = list(new.parents)
    old_parents = list(old.parents)
    out: list[Reason] = []
    for i, p_new in enumerate(new_parents):
        p_old = old_parents[i] if i < len(old_parents) else None
        if p_new == p_old:
            continue
        rec_new = view.origin(p_new, before=new.time + 1e-6)
        rec_old = view.origin(p_old, before=old.time + 1e-6) if p_old is not None else None
        if rec_new is None or rec_old is None or depth >= _MAX_UPSTREAM:
            out.append(
                Reason(
                    "input",
                    f"its input changed ({p_old} → {p_new}); the step that made it is not recorded",
                    before=p_old,
                    after=p_new,
                )
            )
            continue
        upstream = StepRef.of(rec_new)
        for r in compare(view, rec_new, rec_old, depth + 1):
            if r.upstream is None:
                r = replace(r, upstream=upstream)
            out.append(r)
    if len(old_parents) > len(new_parents):
        out.append(Reason("input", "it has fewer inputs than before"))
    return out


def _source_reasons(view: LedgerView, new: StepRecord, old: StepRecord, depth: int) -> list[Reason]:
    from cachetool.lineage.records import SourceInfo

    src_new = new.source or SourceInfo()
    src_old = old.source or SourceInfo()
    kind = src_new.kind
    if kind == "builder":
        files_new = {f.path: f for f in src_new.data_files}
        files_old = {f.path: f for f in src_old.data_files}
        parts = []
        for path in sorted(set(files_new) | set(files_old)):
            a, b = files_old.get(path), files_new.get(path)
            name = os.path.basename(path)
            if a is None:
                parts.append(f"{name} added")
            elif b is None:
                parts.append(f"{name} removed")
            elif (a.size, a.mtime) != (b.size, b.mtime):
                detail = (
                    f"size {a.size} → {b.size} bytes" if a.size != b.size else f"modified {_clock(b.mtime)}"
                )
                parts.append(f"{name} modified ({detail})")
        builder = src_new.builder or "?"
        if parts:
            message = f"the source dataset changed: {', '.join(parts)}"
        elif src_new.relative_data_dir != src_old.relative_data_dir:
            message = (
                f"the source dataset changed: the {builder} builder's data or configuration differs "
                f"({src_old.relative_data_dir} → {src_new.relative_data_dir})"
            )
        else:
            message = f"the source dataset changed ({old.result} → {new.result})"
        return [
            Reason(
                "source",
                message,
                before=str(src_old.relative_data_dir),
                after=str(src_new.relative_data_dir),
            )
        ]
    if kind == "saved":
        return [
            Reason(
                "source",
                f"the saved dataset at {src_new.path} holds another state "
                f"({src_old.state_fingerprint} → {src_new.state_fingerprint})",
                before=src_old.state_fingerprint,
                after=src_new.state_fingerprint,
            )
        ]
    if new.parents != old.parents:
        return _input_reasons(view, new, old, depth)
    return [Reason("source", "the source data changed (an in-memory dataset or a file of its own)")]


def _argument_reasons(view: LedgerView, new: StepRecord, old: StepRecord) -> list[Reason]:
    args_new = new.args
    args_old = old.args
    differing = []
    for name in sorted(set(args_new) | set(args_old)):
        a, b = args_old.get(name), args_new.get(name)
        if a is None or b is None:
            differing.append(name)
            continue
        if a.digest is not None and b.digest is not None:
            if a.digest != b.digest:
                differing.append(name)
        elif a.repr != b.repr:
            differing.append(name)
    if not differing:
        return []
    if all(name in NON_SEMANTIC for name in differing):
        changes = [f"{n} {_repr(args_old.get(n))} → {_repr(args_new.get(n))}" for n in differing]
        return [
            Reason(
                "non-semantic",
                f"only {', '.join(changes)} changed, which does not change the result "
                "(datasets hashes it anyway)",
                argument=differing[0],
                before=_repr(args_old.get(differing[0])),
                after=_repr(args_new.get(differing[0])),
                hint="pass the same value every time, or new_fingerprint= to keep the cached result",
            )
        ]
    out = []
    for name in differing:
        if name == "function":
            out.extend(_function_reasons(view, new, old))
        else:
            out.append(_value_reason(name, args_old.get(name), args_new.get(name)))
    return out


def _repr(entry: ArgInfo | None) -> str:
    # datasets leaves out arguments equal to their default before hashing.
    if entry is None:
        return "(default)"
    return entry.repr if entry.repr is not None else f"<{entry.type or '?'}>"


def _value_reason(name: str, old: ArgInfo | None, new: ArgInfo | None) -> Reason:
    """An argument other than the function changed: name the part, with its values."""
    from cachetool.fingerprint.diff import diff_trees, render_path

    if old is None or new is None:
        before, after = _repr(old), _repr(new)
        return Reason(
            "argument",
            f"`{name}` changed {before} → {after}",
            argument=name,
            path=name,
            before=before,
            after=after,
        )
    sa, sb = old.summary, new.summary
    if sa is not None and sb is not None:
        culprit = diff_trees(name, [dict(sa), dict(sb)])
        if culprit is not None:
            before, after = culprit.reprs[0], culprit.reprs[-1]
            path = render_path(name, culprit.path)
            if culprit.kind in NONDETERMINISTIC_KINDS:
                return _nondeterministic(name, path, culprit.description, culprit.hint)
            return Reason(
                "argument",
                f"`{path}` changed {before} → {after}",
                argument=name,
                path=path,
                before=before,
                after=after,
            )
    before, after = _repr(old), _repr(new)
    return Reason(
        "argument",
        f"`{name}` changed {before} → {after}",
        argument=name,
        path=name,
        before=before,
        after=after,
    )


def _nondeterministic(argument: str, path: str, description: str | None, hint: str | None) -> Reason:
    what = f"`{path}` ({description})" if description else f"`{path}`"
    return Reason(
        "nondeterministic",
        f"{what} pickles differently in every process — not a change of yours; run "
        "`cachetool check-determinism` on the script",
        argument=argument,
        path=path,
        hint=hint,
    )


def _function_reasons(view: LedgerView, new: StepRecord, old: StepRecord) -> list[Reason]:
    from cachetool.fingerprint.diff import diff_trees, render_path

    fa = old.function or FunctionInfo()
    fb = new.function or FunctionInfo()
    if fa.qualname != fb.qualname:
        return [
            Reason(
                "function",
                f"another function: {fa.qualname} → {fb.qualname}",
                argument="function",
                before=fa.qualname,
                after=fb.qualname,
            )
        ]
    code_a, code_b = fa.code_hash, fb.code_hash
    file_a, file_b = (os.path.basename(f.file or "") for f in (fa, fb))
    if code_a and code_a == code_b and file_a != file_b and fb.qualname != "<lambda>":
        return [
            Reason(
                "source-file",
                f"the function `{fb.qualname}` is the same but its source file changed "
                f"({file_a} → {file_b}), which datasets hashes (a function's code keeps its file name)",
                argument="function",
                path="function",
                before=file_a,
                after=file_b,
                hint="run the script under one name, or define the function in a module both scripts import",
            )
        ]
    changed = code_a != code_b if code_a and code_b else fa.source_hash != fb.source_hash
    if changed:
        lines = _line_changes(view, fa, fb)
        where = f" ({lines[0]})" if lines else ""
        return [
            Reason(
                "function-source",
                f"the source of `{fb.qualname}` changed{where}",
                argument="function",
                path="function",
                lines=tuple(lines),
            )
        ]
    arg_a, arg_b = old.arg("function"), new.arg("function")
    sa = arg_a.summary if arg_a is not None else None
    sb = arg_b.summary if arg_b is not None else None
    if sa is not None and sb is not None:
        culprit = diff_trees("function", [dict(sa), dict(sb)])
        if culprit is not None:
            before, after = culprit.reprs[0], culprit.reprs[-1]
            path = render_path("function", culprit.path)
            if culprit.kind in NONDETERMINISTIC_KINDS or before == after or culprit.kind == "code":
                return [_nondeterministic("function", path, culprit.description, culprit.hint)]
            return [
                Reason(
                    "argument",
                    f"`{path}` changed {before} → {after}",
                    argument="function",
                    path=path,
                    before=before,
                    after=after,
                )
            ]
    return [
        _nondeterministic(
            "function",
            "function",
            f"function {fb.qualname!r}",
            "its source is unchanged, yet it hashes differently: something it references is "
            "built at run time",
        )
    ]


def _line_changes(view: LedgerView, fa: FunctionRef, fb: FunctionRef) -> list[LineChange]:
    old_text = view.sources.get(str(fa.source_hash))
    new_text = view.sources.get(str(fb.source_hash))
    if old_text is None or new_text is None:
        return []
    start_old = _line(fa)
    start_new = _line(fb)
    return diff_lines(old_text, new_text, start_old, start_new)


def diff_lines(old: str, new: str, start_old: int = 1, start_new: int = 1) -> list[LineChange]:
    """Changed lines between two versions of a function, numbered in the file (the newer one
    for changed and added lines)."""
    a, b = old.splitlines(), new.splitlines()
    out: list[LineChange] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            before = a[i1 + k].strip() if i1 + k < i2 else None
            after = b[j1 + k].strip() if j1 + k < j2 else None
            line = start_new + j1 + k if after is not None else start_old + i1 + k
            out.append(LineChange(line, before, after))
            if len(out) >= _MAX_LINES:
                return out
    return out


# ------------------------------------------------------------------------------------------
# Explaining steps
# ------------------------------------------------------------------------------------------


def _on_other_host(other: StepRecord, rec: StepRecord) -> str:
    """` on node-3` when `other` ran on another host than `rec` (a shared cache), else ""."""
    return f" on {other.host}" if other.host and rec.host and other.host != rec.host else ""


def _status(rec: StepRecord) -> str:
    return {"miss": "computed", "partial": "partial", "hit": "loaded"}.get(rec.cache, "no file")


def _removed_between(view: LedgerView, fp: str | None, after: float, before: float) -> GcRecord | None:
    """The latest gc record of this root that removed `fp`'s files between two of its steps."""
    if fp is None or view.ledger is None:
        return None
    found = [g for g in view.ledger.gc_records() if fp in g.fingerprints and after < g.time < before]
    return found[-1] if found else None


def explain_record(view: LedgerView, rec: StepRecord, *, history: int = 0) -> StepExplanation:
    """Why `rec`'s step computed its result: compared with its most recent sibling."""
    ref = StepRef.of(rec)
    duration = rec.duration
    stale = tuple(_stale_for_hit(view, rec)) if rec.cache == "hit" else ()
    same = view.earlier_same(rec)
    siblings = view.siblings(rec)
    reasons: tuple[Reason, ...]
    compared: StepRef | None = None
    if rec.cache == "hit":
        reasons = ()  # loaded: nothing to explain (a stale reuse is in `stale`)
    elif rec.random_fallback is not None:
        reasons = (_random_reason(view.with_summaries(rec), rec.random_fallback, earlier=False),)
        compared = StepRef.of(siblings[0]) if siblings else None
    elif same is not None and rec.computed and same.computed and same.end > rec.time:
        reasons = (
            Reason(
                "concurrent",
                f"another run{_on_other_host(same, rec)} was computing the same fingerprint at the "
                f"same time (from {_clock(same.time)} to {_clock(same.end)}): neither could reuse the "
                "other's file",
            ),
        )
        compared = StepRef.of(same)
    elif same is not None and rec.computed:
        gone = "some of its num_proc shards were" if rec.cache == "partial" else "its cache file was"
        removal = _removed_between(view, rec.result, same.time, rec.time)
        why = (
            f"removed by cachetool gc at {_clock(removal.time)}"
            + (f" ({removal.reason})" if removal.reason else "")
            if removal is not None
            else "gone (deleted, cleaned up, or load_from_cache_file=False)"
        )
        reasons = (
            Reason(
                "same-fingerprint",
                f"its fingerprint is not new (also made at {_clock(same.time)}{_on_other_host(same, rec)}); "
                f"{gone} {why}",
            ),
        )
        compared = StepRef.of(same)
    elif siblings:
        reasons = tuple(compare(view, rec, siblings[0]))
        compared = StepRef.of(siblings[0])
    elif view.first_run(rec):
        reasons = (
            Reason(
                "first-run",
                "first run recorded in this cache: it held nothing yet, so every step ran",
            ),
        )
    else:
        reasons = (Reason("first-run", "first time this step ran (nothing recorded to compare with)"),)
    past: list[tuple[StepRef, tuple[Reason, ...]]] = []
    for newer, older in itertools.pairwise(siblings[: 1 + history]):
        past.append((StepRef.of(older), tuple(compare(view, newer, older))))
    return StepExplanation(
        step=ref,
        cache=rec.cache,
        duration=duration,
        status=_status(rec),
        reasons=reasons,
        compared_with=compared,
        history=tuple(past),
        stale=stale,
    )


def resolve_fingerprint(view: LedgerView, prefix: str) -> str:
    """The recorded fingerprint `prefix` names, by the one naming rule
    (`cachetool.lineage.ledger.resolve`: path, exact fingerprint or alias, unique prefix); a cache
    file's name works too. An entry whose own fingerprint is not recorded resolves to the one of
    its fingerprints that is (after `load_from_disk`, the alias)."""
    from cachetool.cache.scan import scan_cache
    from cachetool.lineage.ledger import resolve

    m = re.search(r"cache-([^/\\]+?)(?:_\d{5}_of_\d{5})?\.arrow$", prefix)
    if m and os.sep not in prefix:
        prefix = m.group(1)
    ledger = view.ledger or Ledger.load(view.root, follow=False)
    try:
        report = scan_cache(view.root, use_index=True, ledger=ledger)
    except CachetoolError:
        report = None
    if report is None:
        matches = sorted(fp for fp in view.by_result if fp == prefix) or sorted(
            fp for fp in view.by_result if fp.startswith(prefix)
        )
        if not matches:
            raise UnknownFingerprint(prefix, view.root)
        if len(matches) > 1:
            raise AmbiguousFingerprint(prefix, matches)
        return matches[0]
    got = resolve(prefix, report, ledger, recorded=view.by_result)
    if got.fingerprint not in view.by_result and got.entry is not None:
        e = got.entry
        return next(
            (fp for fp in (e.fingerprint, *e.aliases) if fp and fp in view.by_result), got.fingerprint
        )
    return got.fingerprint


def explain_fingerprint(
    root: str | os.PathLike[str],
    fingerprint: str,
    *,
    history: int = 3,
    view: LedgerView | None = None,
    all_roots: bool = False,
) -> ExplainReport:
    """Why the step that made `fingerprint` (a unique prefix is enough) was computed: its latest
    computation compared with the siblings before it, most recent first, plus stale reuses.

    The Python side of `cachetool explain FINGERPRINT`; `all_roots` compares with the records of
    every known cache root too (`--all-roots`)."""
    view = view or load_view(root, all_roots=all_roots)
    fp = resolve_fingerprint(view, fingerprint)
    recs = [r for r in view.by_result[fp] if fp not in r.parents and view.own(r)] or [
        r for r in view.by_result[fp] if fp not in r.parents
    ]
    if not recs:
        raise NoRecords(Path(root), f"step that made {fp}")
    computed = [r for r in recs if r.computed or r.random_fallback is not None]
    target = computed[-1] if computed else recs[-1]
    step = explain_record(view, target, history=history)
    stale = tuple(s for r in recs if r.cache == "hit" for s in _stale_for_hit(view, r))
    stale += tuple(s for s in stale_hits(root, view=view, only=fp) if s.reused_at is None)
    return ExplainReport(
        root=Path(root),
        mode="fingerprint",
        steps=(step,),
        run=target.run or None,
        run_time=target.time,
        loaded=sum(r.cache == "hit" for r in recs),
        stale=_dedupe(stale),
        warnings=view.warnings,
    )


def last_run(view: LedgerView, script: str | os.PathLike[str] | None = None) -> str:
    """The id of the most recent recorded run of this root (of `script`, when given)."""
    root = os.path.abspath(os.fspath(view.root))
    wanted = os.path.realpath(os.fspath(script)) if script is not None else None
    best: tuple[float, str] | None = None
    for rec in view.steps:
        if not view.own(rec) and rec.root != root:
            continue
        if wanted is not None:
            site = rec.call_site
            if site is None or not site.file or os.path.realpath(site.file) != wanted:
                continue
        if rec.run and (best is None or rec.time >= best[0]):
            best = (rec.time, rec.run)
    if best is None:
        what = f"run of {script}" if script is not None else "run"
        raise NoRecords(Path(root), what)
    return best[1]


def explain_run(
    root: str | os.PathLike[str],
    run: str | None = None,
    *,
    script: str | os.PathLike[str] | None = None,
    view: LedgerView | None = None,
    all_roots: bool = False,
) -> ExplainReport:
    """Every step of a run that computed its result, each with its reason ("first time this step
    ran" when there is nothing to compare with), and the stale hits of the run. The latest run
    of the root (or of `script`) unless `run` names one.

    The Python side of `cachetool explain --last` / `--script` (`all_roots`: `--all-roots`)."""
    view = view or load_view(root, all_roots=all_roots)
    run_id = run or last_run(view, script)
    records = sorted((r for r in view.steps if r.run == run_id and view.own(r)), key=lambda r: r.seq)
    if not records:
        raise NoRecords(Path(root), f"records of run {run_id}")
    steps = []
    stale: list[StaleHit] = []
    uncached: list[UncachedStep] = []
    loaded = 0
    for rec in records:
        reason = rec.uncached
        if reason is not None:
            uncached.append(UncachedStep(StepRef.of(rec), reason, rec.duration))
        elif rec.cache == "hit":
            loaded += 1
            stale.extend(_stale_for_hit(view, rec))
        elif rec.computed or rec.random_fallback is not None:
            steps.append(explain_record(view, rec))
    return ExplainReport(
        root=Path(root),
        mode="run",
        steps=tuple(steps),
        run=run_id,
        run_time=min(r.time for r in records),
        loaded=loaded,
        stale=_dedupe(stale),
        warnings=view.warnings,
        uncached=tuple(uncached),
        interrupted=interruption(view.ledger.records, run_id) if view.ledger is not None else None,
    )


def _dedupe(items: Iterable[StaleHit]) -> tuple[StaleHit, ...]:
    out: dict[tuple[str, float | None], StaleHit] = {}
    for s in items:
        out.setdefault((s.fingerprint, s.reused_at), s)
    return tuple(out.values())


# ------------------------------------------------------------------------------------------
# Stale hits
# ------------------------------------------------------------------------------------------


def _by_reference_parts(fn: FunctionInfo) -> list[FunctionRef]:
    """The function and helpers of a record that `datasets` hashes by name only."""
    parts: list[FunctionRef] = []
    if fn.by_reference:
        parts.append(fn)
    parts.extend(fn.deps)
    return parts


def _stale_for_hit(view: LedgerView, hit: StepRecord) -> list[StaleHit]:
    """A hit whose function or helpers differ from those of the computation it reused."""
    fn_hit = hit.function
    fp = hit.result
    if fn_hit is None or fp is None:
        return []
    comp = view.computing(fp, before=hit.time)
    if comp is None or comp.function is None:
        return []
    then = {str(p.qualname): p for p in _by_reference_parts(comp.function)}
    changes = []
    for part in _by_reference_parts(fn_hit):
        old = then.get(str(part.qualname))
        if old is None:
            continue
        a, b = old.code_hash, part.code_hash
        differs = a != b if a and b else old.source_hash != part.source_hash
        if differs:
            changes.append(SourceChange(str(part.qualname), part.file, tuple(_line_changes(view, old, part))))
    if not changes:
        return []
    return [
        StaleHit(
            fingerprint=fp,
            files=hit.file_paths,
            computed_at=comp.time,
            computed_run=comp.run or None,
            reused_at=hit.time,
            reused_run=hit.run or None,
            changes=tuple(changes),
            step=StepRef.of(hit),
        )
    ]


def stale_hits(
    root: str | os.PathLike[str], *, view: LedgerView | None = None, only: str | None = None
) -> list[StaleHit]:
    """Cache entries of `root` that still exist and were computed by code that has changed since:
    a function from the user's own module (or a helper of theirs it calls), which `datasets`
    hashes by name, so the entry is (or will be) reused although the code is new.

    Two kinds of evidence, the latest per entry: a later recorded run reused it with other code
    (`reused_at` set), or the source file on disk now differs from the code recorded when it was
    computed (`reused_at` None). Changes in comments and blank lines do not count.

    The Python side of `cachetool verify --stale`."""
    view = view or load_view(root)
    root_abs = os.path.abspath(os.fspath(root))
    out: list[StaleHit] = []
    disk_cache: dict[str, str | None] = {}
    for fp, recs in view.by_result.items():
        if only is not None and fp != only:
            continue
        comp = view.computing(fp)
        if comp is None or comp.function is None:
            continue
        files = list(comp.file_paths)
        if not files or not all(os.path.exists(p) for p in files):
            continue
        if not any(os.path.abspath(p).startswith(root_abs + os.sep) for p in files):
            continue
        later = [r for r in recs if r.cache == "hit" and r.time > comp.time]
        found: list[StaleHit] = []
        for hit in reversed(later):
            found = _stale_for_hit(view, hit)
            if found:
                break
        changes, checked = _disk_changes(view, comp.function, disk_cache)
        if not checked:
            # The sources cannot be read here (another machine, a moved file): the runs decide.
            out.extend(found)
        elif changes:
            out.append(
                StaleHit(
                    fingerprint=fp,
                    files=tuple(files),
                    computed_at=comp.time,
                    computed_run=comp.run or None,
                    reused_at=found[0].reused_at if found else None,
                    reused_run=found[0].reused_run if found else None,
                    changes=tuple(changes),
                    step=StepRef.of(comp),
                )
            )
    out.sort(key=lambda s: (s.computed_at or 0.0, s.fingerprint))
    return [replace(s, root=root_abs) for s in out]


def _disk_changes(
    view: LedgerView, fn: FunctionInfo, files: dict[str, str | None]
) -> tuple[list[SourceChange], int]:
    """The by-reference parts of `fn` whose source on disk now differs from the recorded one, and
    how many parts could be compared at all."""
    changes = []
    checked = 0
    for part in _by_reference_parts(fn):
        recorded = view.sources.get(str(part.source_hash))
        path = part.file
        if recorded is None or path is None:
            continue
        if path not in files:
            try:
                files[path] = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                files[path] = None
        text = files[path]
        if text is None:
            continue
        qualname = str(part.qualname)
        local = _strip_module(qualname, path) or qualname.split(".", 1)[-1]
        current = function_source(text, local)
        if current is None:
            continue
        checked += 1
        if _tokens(current) == _tokens(recorded):
            continue
        start = _line(part)
        lines = diff_lines(recorded, current, start, _def_line(text, local) or start)
        changes.append(SourceChange(qualname, path, tuple(lines)))
    return changes, checked


def _strip_module(qualname: str, path: str) -> str | None:
    """`pkg.text_helpers.clean_text` in `.../text_helpers.py` -> `clean_text`."""
    stem = Path(path).stem
    marker = f"{stem}."
    idx = qualname.find(marker)
    if stem == "__init__":
        return qualname.rsplit(".", 1)[-1]
    return qualname[idx + len(marker) :] if idx >= 0 else None


def _find_def(tree: ast.AST, qualname: str) -> ast.AST | None:
    node: ast.AST = tree
    for part in qualname.split("."):
        found = None
        for child in getattr(node, "body", ()):
            if (
                isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and child.name == part
            ):
                found = child
        if found is None:
            return None
        node = found
    return node


def _def_line(text: str, qualname: str) -> int | None:
    try:
        node = _find_def(ast.parse(text), qualname)
    except SyntaxError:
        return None
    if node is None:
        return None
    decorators = getattr(node, "decorator_list", [])
    return min([getattr(node, "lineno", 1), *(d.lineno for d in decorators)])


def function_source(text: str, qualname: str) -> str | None:
    """The source of the function `qualname` in a module's text, as `inspect.getsource` gives
    it (decorators included), or None when it is not there any more."""
    try:
        node = _find_def(ast.parse(text), qualname)
    except SyntaxError:
        return None
    if node is None or not hasattr(node, "end_lineno"):
        return None
    start = _def_line(text, qualname) or 1
    lines = text.splitlines(keepends=True)
    return "".join(lines[start - 1 : getattr(node, "end_lineno", start)])


def _tokens(source: str) -> list[tuple[int, str]] | str:
    """The tokens of a piece of source without comments, blank lines and indentation amounts: two
    versions with equal tokens are the same code."""
    import textwrap

    try:
        toks = tokenize.generate_tokens(io.StringIO(textwrap.dedent(source)).readline)
        return [
            (t.type, t.string)
            for t in toks
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
        ]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return source.strip()


def _clock(t: Any) -> str:
    """`10:31` today, else `2026-11-20 10:31`."""
    import time as _t

    if not isinstance(t, (int, float)):
        return "?"
    now = _t.localtime()
    lt = _t.localtime(t)
    if (lt.tm_year, lt.tm_yday) == (now.tm_year, now.tm_yday):
        return _t.strftime("%H:%M", lt)
    return _t.strftime("%Y-%m-%d %H:%M", lt)
