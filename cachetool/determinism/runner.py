"""Run a script N times in subprocesses that differ on purpose and compare their fingerprints.

Each run is ``python -m cachetool run script.py [args]`` with its own ``PYTHONHASHSEED`` and its own
events file (``CACHETOOL_TRACE_EVENTS``, with hash trees: ``CACHETOOL_TRACE_TREES=1``). By default
the runs use the cache the script would use anyway, one after the other; the first computes every
step (``CACHETOOL_TRACE_COLD=1``: nothing loaded from the cache; a step the cache lacks is written
where a plain run writes it, one the cache holds and what is made from it go to a temporary folder,
and so does a file the script names that exists) so that a step changing an object that a later step
hashes shows even when the cache is warm (fingerprints themselves are computed before any cache
lookup). ``isolated=True`` gives each run a fresh temporary ``HF_DATASETS_CACHE`` (removed
afterwards); they run one after another too (a ``save_to_disk`` folder or any other file of the
script's own, outside the caches, would be written by two at once: a run reading it memory-mapped
dies of SIGBUS), or ``jobs`` at once when the caller says the script writes nothing else.

The pieces: `process` (a run's processes and output), `events` (its events file, typed),
`analysis` (the comparison), `cleanup` (what a stopped check leaves), `report` (the result).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.determinism.cleanup import (
    WORKDIR_PREFIX,
    CheckInterrupted,
    Leftovers,
    cache_root,
    terminate_as_interrupt,
)
from cachetool.determinism.process import OUTPUT_CAP, RUN_MARKER_ENV, marked_pids, stop_marked, terminal_lines
from cachetool.determinism.run import Run, RunSettings, run_command
from cachetool.errors import CachetoolError

if TYPE_CHECKING:
    from cachetool.determinism.analysis import Analysis, Cause
    from cachetool.determinism.events import read_events
    from cachetool.determinism.report import DeterminismReport, RunOutcome, RunProgress

__all__ = [
    "OUTPUT_CAP",
    "RUN_MARKER_ENV",
    "WORKDIR_PREFIX",
    "BadScript",
    "CheckInterrupted",
    "DeterminismReport",
    "RunOutcome",
    "RunProgress",
    "check_determinism",
    "marked_pids",
    "read_events",
    "run_command",
    "stop_marked",
    "terminal_lines",
]

#: Warnings shown per run about lines of its events file that could not be read.
_EVENT_WARNINGS_SHOWN = 5
#: Steps recorded in some runs only, named one by one.
_ONE_RUN_ONLY_SHOWN = 5

#: What comparing the runs needs (the ledger's record classes, the analysis, the report: tens of
#: milliseconds of imports), imported while the runs work (`_load_comparison`), not before they
#: start; the names this module gives from them.
_COMPARISON = ("cachetool.determinism.analysis", "cachetool.determinism.report")
_LAZY = {
    "DeterminismReport": "cachetool.determinism.report",
    "RunOutcome": "cachetool.determinism.report",
    "RunProgress": "cachetool.determinism.report",
    "read_events": "cachetool.determinism.events",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def _load_comparison() -> None:
    """Import what the comparison needs, once the runs are going (they use both cores, so this
    costs the check half what it costs before they start)."""
    for module in _COMPARISON:
        importlib.import_module(module)


class BadScript(CachetoolError):
    """The script to check does not exist."""

    def __init__(self, script: Path) -> None:
        super().__init__(f"script not found: {script}")
        self.script = script


@dataclass(frozen=True)
class _Settings:
    """The arguments of `check_determinism`, checked: what the check does, and what each run
    shares (its `workdir` set once the check's temp folder exists)."""

    script: str
    seeds: tuple[int, ...]
    workers: int
    rerun: bool
    runs: RunSettings


def _settings(
    script: str | os.PathLike[str],
    args: Sequence[str],
    *,
    runs: int,
    hash_seeds: Sequence[int] | None,
    timeout: float | None,
    isolated: bool,
    jobs: int | None,
    rerun: bool,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    launcher: Sequence[str] | None,
    progress: Callable[[RunProgress], None] | None,
    cold: bool,
) -> _Settings:
    script_path = Path(script)
    if not (script_path.is_file() or (script_path / "__main__.py").is_file()):
        raise BadScript(script_path)  # a file, or a folder with __main__.py, as `cachetool run`
    if timeout is not None and not timeout >= 0:  # also NaN
        raise CachetoolError(f"invalid --timeout {timeout:g}: give seconds >= 0 (0: no limit)")
    seeds = tuple(hash_seeds) if hash_seeds else tuple(range(1, runs + 1))
    if len(seeds) < 2:
        raise CachetoolError("need at least 2 runs to compare (--runs 2 or --hash-seeds 1,2)")
    if any(not 0 <= s <= 4294967295 for s in seeds):
        raise CachetoolError("hash seeds must be integers from 0 to 4294967295")
    return _Settings(
        script=str(script),
        seeds=seeds,
        workers=max(1, min(len(seeds), jobs or 1)) if isolated else 1,
        rerun=rerun,
        runs=RunSettings(
            # As the user typed it (sys.argv[0] of a plain run), unless the runs start elsewhere.
            script=script_path if cwd is None else script_path.resolve(),
            args=tuple(args),
            timeout=timeout or None,
            isolated=isolated,
            cold=cold,
            cwd=Path(cwd) if cwd is not None else Path.cwd(),
            env=dict(os.environ if env is None else env),
            launcher=launcher,
            progress=progress,
            workdir=Path(),
        ),
    )


def check_determinism(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    runs: int = 2,
    hash_seeds: Sequence[int] | None = None,
    timeout: float | None = 900.0,
    isolated: bool = False,
    jobs: int | None = None,
    rerun: bool = True,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    launcher: Sequence[str] | None = None,
    progress: Callable[[RunProgress], None] | None = None,
    cold: bool = True,
) -> DeterminismReport:
    """Run `script` `runs` times with distinct hash seeds, compare every fingerprint, explain the first.

    `hash_seeds` fixes the seeds (its length sets the number of runs); the default is ``1..runs``, so
    a verdict is reproducible. `isolated` gives each run a fresh temporary cache; the runs go one
    after another, or up to `jobs` at once for a script that writes no file outside its cache (a
    `save_to_disk` folder two runs write at once can kill a run with SIGBUS). When a difference is
    found and `rerun` is true, one more run with the first run's seed tells whether the difference
    depends on ``PYTHONHASHSEED`` or changes on every run. `launcher` replaces the traced
    interpreter (``[sys.executable]`` runs the script plainly: only `cachetool.checkpoint` events).
    `progress` is called about twice a second per running run (the steps it recorded so far) and
    once when it ends. With `cold` (the default) the first run of a shared cache computes every
    step, so a step whose function changes what a later step hashes shows even on a warm cache;
    it writes what the cache lacks where a plain run would (the next run loads it) and leaves the
    files the cache holds alone. ``cold=False`` saves that recomputation.

    Mirrors ``cachetool check-determinism`` (``--runs``, ``--hash-seeds``, ``--timeout``,
    ``--isolated``, ``--jobs``, ``--no-cold``).
    """
    s = _settings(
        script,
        args,
        runs=runs,
        hash_seeds=hash_seeds,
        timeout=timeout,
        isolated=isolated,
        jobs=jobs,
        rerun=rerun,
        cwd=cwd,
        env=env,
        launcher=launcher,
        progress=progress,
        cold=cold,
    )
    return _check(s)


def _check(s: _Settings) -> DeterminismReport:
    # Runs start in their own sessions (a timeout stops a whole num_proc pool), so Ctrl-C does not
    # reach them: every live run is stopped here when this process is interrupted or terminated,
    # and what the runs left (their temp folder, tmp files in the cache) is removed.
    leftovers = Leftovers(None if s.runs.isolated else cache_root(s.runs.env), s.runs.env)
    started = time.time()
    with (
        terminate_as_interrupt(),
        tempfile.TemporaryDirectory(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-") as tmp,
    ):
        workdir = Path(tmp)
        rs = dataclasses.replace(s.runs, workdir=workdir, one_path=s.runs.isolated and s.workers == 1)
        planned = [Run(rs, i, seed) for i, seed in enumerate(s.seeds)]
        try:
            outcomes = _one_after_another(planned) if s.workers == 1 else _at_once(planned, s.workers)
        except BaseException as e:
            raise CheckInterrupted(e, leftovers.remove(started, workdir), workdir) from None
        warnings = _run_warnings(outcomes, leftovers, started, workdir)
        if any(run.stopped_early for run in planned) and not any(o.timed_out for o in outcomes):
            # A run going beside the one that failed was stopped: what it left goes too.
            removed = leftovers.remove(started, workdir)
            if removed:
                warnings.append(
                    f"stopped the run going beside the one that failed; removed what it left: {removed}"
                )
        from cachetool.determinism.report import DeterminismReport

        report = DeterminismReport(
            script=s.script, args=s.runs.args, isolated=s.runs.isolated, runs=tuple(outcomes), analysis=None
        )
        if report.failed_run is not None:
            return dataclasses.replace(report, warnings=tuple(warnings))
        return _compared(
            s,
            report,
            warnings,
            lambda: Run(rs, len(s.seeds) + 1, s.seeds[0]).finish(),
            lambda: Run(rs, len(s.seeds), s.seeds[0], cache_of=planned[0]).finish(),
        )


def _one_after_another(runs: Sequence[Run]) -> list[RunOutcome]:
    """Runs each after the one before (on the shared cache it may reuse what that one wrote),
    stopping at the first failure (the report is about it). The next run's interpreter starts while
    a run works and waits for its turn, so its start and `import datasets` overlap that work. Never
    two at once, a cold first run included: the script's own files (a `save_to_disk` folder, and
    what its maps write there) would be written by both."""
    outcomes: list[RunOutcome] = []
    try:
        for i, run in enumerate(runs):
            run.go()
            if i + 1 < len(runs):
                runs[i + 1].start()
            if i == 0:
                _load_comparison()
            outcomes.append(run.finish())
            if outcomes[-1].failed:
                break
    finally:
        for run in runs:
            run.abort()  # what was started and is not needed (after a failure), or interrupted
    return outcomes


def _at_once(runs: Sequence[Run], workers: int) -> list[RunOutcome]:
    """Runs on isolated caches, up to `workers` at a time."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        outcomes = pool.map(Run.finish, runs)
        _load_comparison()
        return list(outcomes)
    finally:
        for run in runs:
            run.abort()
        pool.shutdown(wait=True, cancel_futures=True)


def _run_warnings(
    outcomes: Sequence[RunOutcome], leftovers: Leftovers, started: float, workdir: Path
) -> list[str]:
    """What the report must say about the runs themselves: a timeout and what was cleaned up after
    it, output cut to its tail, lines of an events file that could not be read."""
    warnings: list[str] = []
    if any(o.timed_out for o in outcomes):
        removed = leftovers.remove(started, workdir)
        stopped = sum(o.stopped for o in outcomes)
        warnings.append(
            f"stopped {stopped} process(es) of the run that timed out"
            + (f"; removed what it left: {removed}" if removed else "")
            + f"; its temp folder {workdir} is removed"
        )
    capped = [o for o in outcomes if o.output_bytes > 2 * OUTPUT_CAP]
    if capped:
        warnings.append(
            f"the script wrote {max(o.output_bytes for o in capped):,} bytes of output in a run; "
            f"only the last {OUTPUT_CAP:,} of stdout and of stderr were kept"
        )
    for o in outcomes:
        shown = o.event_warnings[:_EVENT_WARNINGS_SHOWN]
        warnings.extend(f"run {o.index + 1}: {w}; that event was not compared" for w in shown)
        if len(o.event_warnings) > len(shown):
            warnings.append(
                f"run {o.index + 1}: {len(o.event_warnings) - len(shown)} more unreadable event(s)"
            )
    return warnings


def _compared(
    s: _Settings,
    report: DeterminismReport,
    warnings: list[str],
    extra_run: Callable[[], RunOutcome],
    loading_run: Callable[[], RunOutcome],
) -> DeterminismReport:
    """The report of runs that all finished: their analysis, checked again by one more run with the
    first run's seed when a difference is found (`rerun`), and why nothing was compared if so.
    Isolated runs all compute every step: when a step hashes an object an earlier step changed
    while it ran, one more run on the first run's cache (with its seed) loads that step, so that
    whether its fingerprint depends on the cache state is observed, not inferred."""
    from cachetool.determinism.analysis import analyze

    outcomes = report.runs
    analysis = analyze([o.events for o in outcomes])
    if s.runs.isolated and analysis.unobserved:
        loading = loading_run()
        if loading.failed:
            warnings.append("the run on the first run's cache failed; the notes below were not checked")
        else:
            outcomes = (*outcomes, loading)
            report = dataclasses.replace(report, runs=outcomes)
            analysis = analyze([o.events for o in outcomes])
    # A cold run's internal calls inside the steps it computed are not another path.
    if analysis.one_run_only:
        unreadable = any(o.event_warnings for o in outcomes)
        why = "paths, or some events could not be read" if unreadable else "paths"
        for u in analysis.one_run_only[:_ONE_RUN_ONLY_SHOWN]:
            times = f" ({u.count} times)" if u.count > 1 else ""
            warnings.append(
                f"{u.operation} at {u.location} was recorded in run {u.run + 1} only{times} (the runs "
                f"took different {why}); not compared"
            )
        if len(analysis.one_run_only) > _ONE_RUN_ONLY_SHOWN:
            more = len(analysis.one_run_only) - _ONE_RUN_ONLY_SHOWN
            warnings.append(f"{more} more step(s) recorded in some runs only; not compared")
    extra: RunOutcome | None = None
    if s.rerun and analysis.deterministic_causes:
        extra = extra_run()
        if extra.failed:
            warnings.append("the extra run with an equal hash seed failed; variation not determined")
        else:
            analysis = _with_variation(analysis, outcomes[0], extra)
    report = dataclasses.replace(report, analysis=analysis, rerun=extra, warnings=tuple(warnings))
    if report.nothing_compared is not None:
        # The script's own warnings say why (tracing off, an early exit): show them.
        said = outcomes[0].stderr_tail.strip()
        extra_lines = [f"run 1 wrote on stderr:\n{said}"] if said else []
        report = dataclasses.replace(report, warnings=(*warnings, report.nothing_compared, *extra_lines))
    return report


def _with_variation(analysis: Analysis, first: RunOutcome, extra: RunOutcome) -> Analysis:
    """Mark each cause ``PYTHONHASHSEED`` when the equal-seed run reproduces the first run's
    fingerprint there, else ``every run``."""
    from cachetool.determinism.analysis import align

    rows, _ = align([first.events, extra.events])
    twin_of = {row[0]: row[1] for row in rows}
    causes: list[Cause] = []
    for cause in analysis.causes:
        position = cause.step.positions[0]
        if cause.kind in ("random", "cache-state") or position not in twin_of:
            causes.append(cause)
            continue
        same = extra.events[twin_of[position]].result == first.events[position].result
        if same:
            # Nothing made at run time: no hint may say "different in each run".
            from cachetool.fingerprint.diff import seeded

            culprits = tuple(seeded(c) for c in cause.culprits)
            causes.append(dataclasses.replace(cause, variation="PYTHONHASHSEED", culprits=culprits))
        else:
            causes.append(dataclasses.replace(cause, variation="every run"))
    return dataclasses.replace(analysis, causes=tuple(causes))
