"""Explaining steps: one record against its siblings, the step that made a fingerprint, every
computed step of a run. The Python side of `cachetool explain`."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from cachetool.errors import CachetoolError, option
from cachetool.formatting import clock_time, short_duration
from cachetool.history.explain.answer import (
    ExplainReport,
    Reason,
    StaleHit,
    StepExplanation,
    StepRef,
    StepStatus,
    UncachedStep,
)
from cachetool.history.explain.reasons import (
    compare,
    concurrent_reason,
    random_reason,
    same_fingerprint_reason,
)
from cachetool.history.explain.stale import (
    derived_hit,
    stale_for_hit,
    stale_hits,
    stale_input,
    with_removals,
)
from cachetool.history.graph import NOT_RECORDED, StepGraph
from cachetool.history.ledger import Ledger
from cachetool.history.records.other import RunEndRecord, RunStartRecord
from cachetool.history.records.steps import StepRecord, StepStartRecord
from cachetool.history.runs import failure, interruption, open_starts

_NOTHING_CACHED = ": nothing was cached"
_STATUS: dict[str, StepStatus] = {"miss": "computed", "partial": "partial", "hit": "loaded"}


def explain_record(view: StepGraph, rec: StepRecord, *, history: int = 0) -> StepExplanation:
    """Why `rec`'s step computed its result: compared with its most recent sibling."""
    siblings = view.siblings(rec)
    reasons, compared = _reasons(view, rec, siblings)
    if rec.resumed:  # its killed run began it, and left rows: not a first time, nor "nothing cached"
        kept = (
            replace(r, message=r.message.removesuffix(_NOTHING_CACHED)) if r.kind == "failed-before" else r
            for r in reasons
            if r.kind not in ("first-run", "killed-before")
        )
        reasons = (*kept, Reason("resumed", rec.resumed.text))
    if rec.rekeyed:  # what it computed was the proof; the result is the earlier one
        reasons += (Reason("rekeyed", rec.rekeyed.text),)
    pairs = itertools.pairwise(siblings[: 1 + history])
    past = tuple((StepRef.of(older), tuple(compare(view, newer, older))) for newer, older in pairs)
    return StepExplanation(
        step=StepRef.of(rec),
        cache=rec.cache,
        duration=rec.duration,
        status=_STATUS.get(rec.cache, "no file"),
        reasons=reasons,
        compared_with=compared,
        history=past,
        stale=tuple(stale_for_hit(view, rec)) if rec.cache == "hit" else (),
    )


def _reasons(
    view: StepGraph, rec: StepRecord, siblings: list[StepRecord]
) -> tuple[tuple[Reason, ...], StepRef | None]:
    """The reasons `rec` computed its result, and the record they compare it with."""
    same = view.earlier_same(rec)
    if rec.cache == "hit":
        return (), None  # loaded: nothing to explain (a stale reuse is in `stale`)
    if rec.random_fallback is not None:
        reason = random_reason(view.with_summaries(rec), rec.random_fallback, earlier=False)
        return (reason,), StepRef.of(siblings[0]) if siblings else None
    beside = view.earlier_same(rec, before=rec.end)  # another run's, begun before this one ended
    if beside is not None and rec.computed and beside.computed and beside.end > rec.time:
        return (concurrent_reason(rec, beside),), StepRef.of(beside)
    if same is not None and rec.computed:
        return (same_fingerprint_reason(view, rec, same),), StepRef.of(same)
    if siblings and siblings[0].result is None and siblings[0].error:
        when = clock_time(siblings[0].time)
        why = f"it failed when it last ran, at {when} ({siblings[0].error}){_NOTHING_CACHED}"
        return (Reason("failed-before", why),), StepRef.of(siblings[0])
    if siblings:
        return tuple(compare(view, rec, siblings[0])), StepRef.of(siblings[0])
    killed = _killed_attempt(view, rec)
    if killed is not None:
        gap = rec.time - killed.time
        attempt = (  # begun shortly before: the two may well have run side by side
            f"in run {killed.run}, began {short_duration(gap)} before this one and"
            if gap < 120
            else f"in run {killed.run} at {clock_time(killed.time)},"
        )
        if killed.parents == rec.parents:
            why = f"its last attempt, {attempt} was killed before it finished: nothing was cached"
        else:
            why = f"an earlier attempt, {attempt} was killed before it finished; its input differed"
        return (Reason("killed-before", why),), None
    if view.first_run(rec):
        loaded = any(
            isinstance(r, StepRecord) and r.run == rec.run and r.cache == "hit" for r in view.ledger.records
        )
        why = "nothing recorded to compare with" if loaded else "it held nothing yet, so every step ran"
        return (Reason("first-run", f"first run recorded in this cache: {why}"),), None
    return (Reason("first-run", "first time this step ran (nothing recorded to compare with)"),), None


def _killed_attempt(view: StepGraph, rec: StepRecord) -> StepStartRecord | None:
    """The latest start of this step (same call site; same input first, else any) by an earlier run
    that never wrote the step's record: it was killed in the step."""
    site = rec.call_site
    if site is None:
        return None
    starts = [
        r
        for r in open_starts(view.ledger.records)
        if r.run != rec.run
        and r.time < rec.time
        and r.call_site is not None
        and (r.call_site.file, r.call_site.line) == (site.file, site.line)
    ]
    same = [r for r in starts if r.parents == rec.parents]
    return max(same or starts, key=lambda r: r.time, default=None)


def resolve_fingerprint(view: StepGraph, name: str) -> str:
    """The recorded fingerprint `name` names, by the one naming rule
    (`cachetool.cache.lookup.resolve`: path, cache file name, exact fingerprint or alias,
    unique prefix). An entry whose own fingerprint is not recorded resolves to the one of its
    fingerprints that is (after `load_from_disk`, the alias)."""
    from cachetool.history.ledger import named_elsewhere, resolve_in_root

    with named_elsewhere(view.ledger.root, name, "explain"):
        return resolve_in_root(view.ledger.root, name, view.ledger)[0].recorded_as(view.by_result)


@dataclass(frozen=True)
class ExplainOptions:
    """What `cachetool explain` explains; mirrors its options one to one. Invalid combinations
    raise `CachetoolError` (exit 2) here, so Python is refused exactly as the command is."""

    fingerprint: str | None = option(
        None,
        "A recorded fingerprint (a unique prefix is enough) or a cache-<fp>.arrow path.",
        argument=True,
        show_default=False,
    )
    last: bool = option(False, "Explain every step the most recent recorded run computed.")
    script: str | os.PathLike[str] | None = option(
        None, "Like --last, for the most recent run of this script.", type=Path | None, show_default=False
    )
    history: int = option(3, "With a fingerprint: also compare this many earlier runs.", min=0)
    #: `--all-roots`, declared as every command that reads the ledger declares it.
    all_roots: bool = field(
        default=False,
        metadata={"doc": "Also read the ledgers of every other cache root this user traced (--all-roots)."},
    )

    def __post_init__(self) -> None:
        if self.fingerprint is None and not self.last and self.script is None:
            raise CachetoolError("give a fingerprint, --last or --script SCRIPT")
        if self.fingerprint is not None and (self.last or self.script is not None):
            raise CachetoolError("give either a fingerprint or --last/--script, not both")
        if self.script is not None and not os.path.exists(self.script):
            raise CachetoolError(f"no such script: {self.script}")
        if self.history < 0:
            raise CachetoolError(f"invalid --history {self.history}: must be 0 or more")


def explain(
    root: str | os.PathLike[str],
    fingerprint: str | None = None,
    *,
    last: bool = False,
    script: str | os.PathLike[str] | None = None,
    history: int = 3,
    all_roots: bool = False,
) -> ExplainReport:
    """Why the step that made `fingerprint` was computed (`explain_fingerprint`, comparing
    `history` earlier runs too), or every step the latest run computed (`last`; of `script` with
    `script`: `explain_run`). `all_roots` reads every known cache root (`--all-roots`).

    The Python side of `cachetool explain`, with its options as keywords (`ExplainOptions`, which
    raises `CachetoolError` when neither or both of a fingerprint and `last`/`script` are given,
    or the script does not exist)."""
    o = ExplainOptions(fingerprint, last, script, history, all_roots)
    if o.fingerprint is not None:
        return explain_fingerprint(root, o.fingerprint, history=o.history, all_roots=o.all_roots)
    return explain_run(root, script=o.script, all_roots=o.all_roots)


def explain_fingerprint(
    root: str | os.PathLike[str],
    fingerprint: str,
    *,
    history: int = 3,
    view: StepGraph | None = None,
    all_roots: bool = False,
) -> ExplainReport:
    """Why the step that made `fingerprint` (a unique prefix is enough) was computed: its latest
    computation compared with the siblings before it, most recent first, plus stale reuses.

    The Python side of `cachetool explain FINGERPRINT`; `all_roots` compares with the records of
    every known cache root too (`--all-roots`)."""
    view = view or Ledger.load(root, all_roots=all_roots).view
    fp = resolve_fingerprint(view, fingerprint)
    made = view.by_result.get(fp, [])
    recs = [r for r in made if fp not in r.parents and view.own(r)] or [
        r for r in made if fp not in r.parents
    ]
    if not recs:
        _raise_unended(root, view, fp)
        raise _no_records(root, f"step that made {fp}", view, f"{NOT_RECORDED}; ")
    computed = [r for r in recs if r.computed or r.random_fallback is not None]
    target = computed[-1] if computed else recs[-1]
    step = explain_record(view, target, history=history)
    # Reuses since the latest computation: one before it reused a file that is gone now.
    latest = view.computing(fp)
    since = [r for r in recs if r.cache == "hit" and (latest is None or r.time > latest.time)]
    stale = tuple(s for r in since for s in stale_for_hit(view, r))
    stale += tuple(
        s for s in stale_hits(root, view=view, only=fp) if s.reused_at is None or s.derived_from is not None
    )
    found = _removing_all(view, stale)
    if found:
        # What was made from it is stale too, and only the whole ledger knows all of it (the one
        # read already, unless that holds the other roots' records too).
        every_hit = stale_hits(root, view=None if all_roots else view)
        whole = next((s for s in every_hit if s.fingerprint == fp), None)
        if whole is not None:
            every = tuple(dict.fromkeys((*found[0].remove, *whole.remove)))
            sources = whole.remove_sources or found[0].remove_sources
            found = tuple(replace(s, remove=every, remove_sources=sources) for s in found)
    return ExplainReport(
        root=Path(root),
        mode="fingerprint",
        steps=(step,),
        run=target.run or None,
        run_time=target.time,
        loaded=sum(r.cache == "hit" for r in recs),
        stale=found,
        warnings=view.ledger.warnings,
    )


def _no_records(root: str | os.PathLike[str], what: str, view: StepGraph, first: str = "") -> CachetoolError:
    """The ledger has nothing to explain: no pipeline ran under `cachetool run` (`first` says
    more of it), or what the ledger holds this user may not read (the first warning reading it
    says which file)."""
    traced = first + "run the pipeline with `cachetool run script.py`, or `cachetool.tracing()` in Python"
    why = view.ledger.warnings[0] if view.ledger.warnings else traced
    return CachetoolError(f"no recorded {what} in {Path(root)}: {why}")


def _raise_unended(root: str | os.PathLike[str], view: StepGraph, fp: str) -> None:
    """When a step began to make `fp` in a run killed in it, or raised: say so (the run was traced)."""
    from cachetool.history.runs import failed_step, unended_step

    start = unended_step(view.ledger.records, fp)
    raised = failed_step(view.ledger.records, fp) if start is None else None
    if raised is not None:
        start = raised[0]
    if start is None:
        return
    site = start.call_site
    at = f" @ {os.path.basename(site.file or '?')}:{site.line}" if site is not None else ""
    if raised is not None:
        raise CachetoolError(
            f"the step that made {fp} ({start.operation or 'a step'}{at}) raised in run {start.run} "
            f"({raised[1]}), so it recorded no result (`cachetool explain --last` says how the run "
            "ended, when it is the latest run)"
        )
    raise CachetoolError(
        f"the step that made {fp} ({start.operation or 'a step'}{at}) never ended: its run "
        f"{start.run} was killed in it (`cachetool explain --last` says what it left, when it is "
        "the latest run)"
    )


def last_run(view: StepGraph, script: str | os.PathLike[str] | None = None) -> str:
    """The id of the most recent recorded run of this root (of `script`, when given): the run of
    the latest step, or a later run that started and never ended (killed, or still running,
    before its first step: in `load_dataset`'s own build, which records no step start)."""
    root = os.fspath(view.ledger.root)
    wanted = os.path.realpath(os.fspath(script)) if script is not None else None
    best: tuple[float, str] | None = None
    for rec in view.steps:  # this root's, with --all-roots too (those compare, they are not run)
        if view.ledger.is_foreign(rec) and rec.root != root:
            continue
        if wanted is not None:
            site = rec.call_site
            if site is None or not site.file or os.path.realpath(site.file) != wanted:
                continue
        if rec.run and (best is None or rec.time >= best[0]):
            best = (rec.time, rec.run)
    for start in _unended_starts(view):
        argv0 = os.path.join(start.cwd or "", start.argv[0]) if start.argv else ""
        if wanted is not None and (not argv0 or os.path.realpath(argv0) != wanted):
            continue
        if best is None or start.time > best[0]:
            best = (start.time, start.run)
    if best is None:
        what = f"run of {script}" if script is not None else "run"
        raise _no_records(root, what, view)
    return best[1]


def _unended_starts(view: StepGraph) -> list[RunStartRecord]:
    """The starts of this root's runs that wrote no end."""
    records = view.ledger.records
    ended = {r.run for r in records if isinstance(r, RunEndRecord)}
    starts = (r for r in records if isinstance(r, RunStartRecord) and r.run and r.run not in ended)
    return [r for r in starts if not view.ledger.is_foreign(r)]


def explain_run(
    root: str | os.PathLike[str],
    run: str | None = None,
    *,
    script: str | os.PathLike[str] | None = None,
    all_roots: bool = False,
) -> ExplainReport:
    """Every step of the run `run` (default: the latest run of the root, or of `script`) that
    computed its result, each with its reason ("first time this step ran" when there is nothing to
    compare with), and the stale hits of the run.

    The Python side of `cachetool explain --last` / `--script` (`all_roots`: `--all-roots`)."""
    view = Ledger.load(root, all_roots=all_roots).view
    run_id = run or last_run(view, script)
    # The run's steps in the other roots the view read (a save_to_disk folder the run mapped in
    # after load_from_disk; the cache root its saved data came from): their stale results count.
    every = sorted((r for r in view.steps if r.run == run_id), key=lambda r: r.seq)
    records = [r for r in every if view.own(r)]
    interrupted = interruption(view.ledger.records, run_id)
    failed = failure(view.ledger.records, run_id)
    starts = [r.time for r in _unended_starts(view) if r.run == run_id]
    if not records and not (interrupted and starts):  # killed before its first step: said below
        raise _no_records(root, f"records of run {run_id}", view)
    steps = []
    stale: dict[str, StaleHit] = {}
    uncached: list[UncachedStep] = []
    loaded = 0
    for rec in every:
        own = view.own(rec)
        reason = rec.uncached
        if reason is not None:
            if own:
                uncached.append(UncachedStep(StepRef.of(rec), reason, rec.duration))
        elif rec.cache == "hit":
            loaded += own
            for s in stale_for_hit(view, rec) or _derived_for_hit(view, rec, stale):
                stale.setdefault(s.fingerprint, s)
        elif own and (rec.computed or rec.random_fallback is not None):
            steps.append(explain_record(view, rec))
    return ExplainReport(
        root=Path(root),
        mode="run",
        steps=tuple(steps),
        run=run_id,
        run_time=min(r.time for r in records) if records else min(starts),
        loaded=loaded,
        stale=_removing_all(view, stale.values()),
        warnings=view.ledger.warnings,
        uncached=tuple(uncached),
        interrupted=interrupted,
        failed=failed,
    )


def _derived_for_hit(view: StepGraph, hit: StepRecord, stale: Mapping[str, StaleHit]) -> list[StaleHit]:
    """A hit of a result made from a stale result upstream (`stale`: those of the run so far)."""
    fp = hit.result
    comp = view.computing(fp, before=hit.time) if fp is not None else None
    if fp is None or comp is None:
        return []
    cause = stale_input(view, fp, comp.time, stale)
    return [derived_hit(fp, comp, hit.file_paths, cause, hit)] if cause is not None else []


def _removing_all(view: StepGraph, found: Iterable[StaleHit]) -> tuple[StaleHit, ...]:
    """`found`, deduplicated, each hint removing every stale entry of the report in its cache
    root (the view's unless found in another) that still exists: one gc command per root, since gc
    takes one `--cache-dir`."""
    root = os.fspath(view.ledger.root)
    unique: dict[tuple[str, float | None], StaleHit] = {}
    for s in found:
        unique.setdefault((s.fingerprint, s.reused_at), replace(s, root=s.root or root))
    items = with_removals(view, unique.values())
    where = {s.fingerprint: s.root for s in items}
    out = []
    for s in items:
        every = tuple(dict.fromkeys(fp for x in items for fp in x.remove if where.get(fp) == s.root))
        sources = any(x.source for x in items if x.fingerprint in every)
        out.append(replace(s, remove=every or s.remove, remove_sources=sources))
    return tuple(out)
