"""Run a script N times in subprocesses that differ on purpose (hash seed, cache state) and compare
their fingerprints; what a stopped check leaves is removed here. docs/check-determinism.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.determinism.process import OUTPUT_CAP, Run, RunSettings
from cachetool.errors import CachetoolError, ExitCode, option

if TYPE_CHECKING:
    from cachetool.determinism.verdict import Analysis, Cause, DeterminismReport, RunOutcome, RunProgress

#: Unreadable lines of a run's events file, and steps recorded in some runs only, named one by one.
_SHOWN = 5


#: The temp folder of a check: `cachetool-determinism-<pid>-<random>`; `gc --temp` removes it
#: once that process is gone.
WORKDIR_PREFIX = "cachetool-determinism-"


class CheckInterrupted(CachetoolError):
    """Ctrl-C or SIGTERM: the runs were stopped and what they left removed (the message says what)."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, cause: BaseException, removed: str, workdir: Path) -> None:
        what = "terminated" if isinstance(cause, Terminated) else "interrupted"
        left = f"; removed what its runs left: {removed}" if removed else ""
        super().__init__(
            f"check-determinism {what}: stopped the running script{left}; removed its temp folder {workdir}"
        )
        self.cause = cause


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that cleanup runs as for Ctrl-C."""


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class Leftovers:
    """What stopped runs leave: `tmp*` files in the user's cache, `hf_datasets-*` and `pymp-*`
    temp folders. Only what the check made goes (files written since it started, folders new
    since), each through gc's own checks (not open, not mapped, not owned by a live process)."""

    def __init__(self, isolated: bool, env: Mapping[str, str]) -> None:
        from cachetool.cache.locations import resolve_cache_root, temp_dir

        # Isolated runs' caches go with the check's temp folder.
        self.cache_root = None if isolated else resolve_cache_root(None, environ=env).path.expanduser()
        self.temp = temp_dir(env).path
        self.before = self._temp_folders()

    def _temp_folders(self) -> set[str]:
        from cachetool.cache.layout import temp_folder_kind

        try:
            return {n for n in os.listdir(self.temp) if temp_folder_kind(n) in ("hf_datasets", "pymp")}
        except OSError:
            return set()

    def remove(self, since: float, workdir: Path) -> str:
        """Remove them; returns what went, in words ("" when nothing)."""
        try:
            from cachetool.cache.layout import Kind
            from cachetool.maintenance.gc import GcOptions
            from cachetool.maintenance.gc.execute import execute
            from cachetool.maintenance.gc.plan import plan_gc

            root = self.cache_root if self.cache_root is not None and self.cache_root.is_dir() else workdir
            plan = plan_gc(root, GcOptions(temp=True, min_age=0.0, tmp_dir=self.temp))
            new_temp = self._temp_folders() - self.before
            mine = tuple(
                i
                for i in plan.items
                if (
                    i.scope == "root"
                    and root != workdir
                    and i.kind == Kind.TEMP
                    and all(t.mtime is not None and t.mtime >= since - 1 for t in i.targets)
                )
                or (i.scope == "temp" and i.path.name in new_temp)
            )
            if not mine:
                return ""
            result = execute(dataclasses.replace(plan, items=mine), log=False)
        except Exception:  # cleanup must never hide the report; gc --temp removes them later
            return ""
        files = sum(1 for o in result.removed if o.item.scope == "root")
        folders = sum(1 for o in result.removed if o.item.scope == "temp")
        words = (
            (files, f"{files} tmp file(s) in {self.cache_root}"),
            (folders, f"{folders} temp folder(s) in {self.temp}"),
        )
        return " and ".join(w for n, w in words if n)


def _load_comparison() -> None:
    """Import the comparison (tens of milliseconds) while the runs go, not before they start."""
    for module in ("cachetool.determinism.analysis", "cachetool.determinism.verdict"):
        importlib.import_module(module)


@dataclass(frozen=True)
class CheckOptions:
    """What `cachetool check-determinism` does; mirrors its options one to one (the seeds as
    integers). Invalid values raise `CachetoolError` (exit 2) here, so Python is refused exactly as
    the command is."""

    script: str | os.PathLike[str] = option(
        dataclasses.MISSING, "The pipeline script to run.", argument=True, type=Path, show_default=False
    )
    args: Sequence[str] = option(
        (),
        "Arguments for the script, after it, as with `cachetool run`. Options check-determinism "
        "knows are its own: put script arguments that clash with them after `--`.",
        argument=True,
        keyword="script_args",
        type=list[str] | None,
        show_default=False,
    )
    runs: int = option(2, "How many runs to compare.", "--runs", "-n", min=2)
    hash_seeds: Sequence[int] | None = option(
        None,
        "Comma-separated PYTHONHASHSEED values, one per run (sets the number of runs). Default: 1,2,...",
        type=str | None,
        show_default=False,
    )
    timeout: float | None = option(
        900.0, "Seconds a run may take before it is stopped (0: no limit).", type=float
    )
    isolated: bool = option(
        False,
        "Give each run a fresh temporary HF_DATASETS_CACHE (removed afterwards). Default: "
        "the cache the script uses anyway, the runs one after the other; isolated runs go --jobs "
        "at a time (default 1).",
    )
    jobs: int | None = option(
        None,
        "With --isolated: runs at once, for a script that writes no file outside its cache "
        "(a save_to_disk folder written by two runs at once can kill one with SIGBUS). Default: 1.",
        "--jobs",
        "-j",
        min=1,
        show_default=False,
    )
    rerun: bool = dataclasses.field(
        default=True,
        metadata={
            "doc": "When runs differ, one more run with the first run's seed tells whether the "
            "difference depends on PYTHONHASHSEED or changes on every run (Python only; the "
            "command always reruns)."
        },
    )
    cold: bool = option(
        True,
        "Make the first run compute every step (what the cache lacks it writes there, "
        "for the next run to load; the files the cache holds are left alone), so a step that "
        "changes an object a later step hashes is found on a warm cache too. --no-cold: faster "
        "on a large warm cache, but such a change goes unseen.",
        "--cold/--no-cold",
    )

    def __post_init__(self) -> None:
        path = Path(self.script)
        if not (path.is_file() or (path / "__main__.py").is_file()):
            raise CachetoolError(f"script not found: {path}")  # a file, or a folder with __main__.py
        if self.timeout is not None and not self.timeout >= 0:  # also NaN
            raise CachetoolError(f"invalid --timeout {self.timeout:g}: give seconds >= 0 (0: no limit)")
        if len(self.seeds) < 2:
            raise CachetoolError("need at least 2 runs to compare (--runs 2 or --hash-seeds 1,2)")
        if any(not 0 <= s <= 4294967295 for s in self.seeds):
            raise CachetoolError("hash seeds must be integers from 0 to 4294967295")
        if len(set(self.seeds)) < len(self.seeds):  # two runs under one seed prove nothing
            seeds = ",".join(map(str, self.seeds))
            raise CachetoolError(f"invalid --hash-seeds '{seeds}': the seeds must differ, one per run")

    @property
    def seeds(self) -> tuple[int, ...]:
        """One hash seed per run: `hash_seeds`, else ``1..runs`` (a verdict is reproducible)."""
        return tuple(self.hash_seeds) if self.hash_seeds else tuple(range(1, self.runs + 1))

    @property
    def workers(self) -> int:
        """Runs at once: `jobs` for isolated runs, else one after another."""
        return max(1, min(len(self.seeds), self.jobs or 1)) if self.isolated else 1


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

    The options are `CheckOptions`' (``cachetool check-determinism``'s). When a difference is found
    and `rerun` is true, one more run with the first run's seed tells whether it depends on
    ``PYTHONHASHSEED`` or changes on every run. `launcher` replaces the traced interpreter
    (``[sys.executable]`` runs the script plainly: only `cachetool.checkpoint` events). `progress`
    is called about twice a second per running run and once when it ends.
    """
    o = CheckOptions(script, tuple(args), runs, hash_seeds, timeout, isolated, jobs, rerun, cold)
    env = dict(os.environ if env is None else env)
    # Runs start in their own sessions (a timeout stops a whole num_proc pool), so Ctrl-C does not
    # reach them: every live run is stopped here when this process is interrupted or terminated,
    # and what the runs left (their temp folder, tmp files in the cache) is removed.
    leftovers = Leftovers(isolated, env)
    started = time.time()
    with (
        terminate_as_interrupt(),
        tempfile.TemporaryDirectory(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-") as tmp,
    ):
        workdir = Path(tmp)
        rs = RunSettings(
            # As the user typed it (sys.argv[0] of a plain run), unless the runs start elsewhere.
            script=Path(script) if cwd is None else Path(script).resolve(),
            args=tuple(args),
            timeout=timeout or None,
            isolated=isolated,
            cold=cold,
            cwd=Path(cwd) if cwd is not None else Path.cwd(),
            env=env,
            launcher=launcher,
            progress=progress,
            workdir=workdir,
            one_path=isolated and o.workers == 1,
        )
        seeds = o.seeds
        planned = [Run(rs, i, seed) for i, seed in enumerate(seeds)]
        try:
            outcomes = _one_after_another(planned) if o.workers == 1 else _at_once(planned, o.workers)
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
        from cachetool.determinism.verdict import DeterminismReport

        report = DeterminismReport(
            script=str(o.script), args=rs.args, isolated=o.isolated, runs=tuple(outcomes), analysis=None
        )
        if report.failed_run is not None:
            return dataclasses.replace(report, warnings=tuple(warnings))
        return _compared(
            o,
            report,
            warnings,
            lambda: Run(rs, len(seeds) + 1, seeds[0]).finish(),
            lambda: Run(rs, len(seeds), seeds[0], cache_of=planned[0]).finish(),
        )


def _one_after_another(runs: Sequence[Run]) -> list[RunOutcome]:
    """Runs each after the one before, stopping at the first failure; the next one's interpreter
    starts and imports `datasets` meanwhile. Never two at once: both would write the script's files."""
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
    """What the report says about the runs: a timeout and its cleanup, capped output, unreadable events."""
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
        said = [f"run {o.index + 1}: {w}; that event was not compared" for w in o.event_warnings]
        warnings += _first(said, f"run {o.index + 1}: {{}} more unreadable event(s)")
    return warnings


def _first(lines: list[str], more: str) -> list[str]:
    """The first `_SHOWN` of `lines`, then how many more there are (`more`, formatted with it)."""
    return lines[:_SHOWN] + ([more.format(len(lines) - _SHOWN)] if len(lines) > _SHOWN else [])


def _compared(
    o: CheckOptions,
    report: DeterminismReport,
    warnings: list[str],
    extra_run: Callable[[], RunOutcome],
    loading_run: Callable[[], RunOutcome],
) -> DeterminismReport:
    """The report of runs that all finished. On a difference, one more run with the first seed
    (`rerun`); isolated runs with an unobserved cache-state note, one more run on the first run's
    cache, so that the dependence on the cache state is observed, not inferred."""
    from cachetool.determinism.analysis import analyze

    outcomes = report.runs
    analysis = analyze([o.events for o in outcomes])
    if o.isolated and analysis.unobserved:
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
        said = [
            f"{u.operation} at {u.location} was recorded in run {u.run + 1} only"
            + (f" ({u.count} times)" if u.count > 1 else "")
            + f" (the runs took different {why}); not compared"
            for u in analysis.one_run_only
        ]
        warnings += _first(said, "{} more step(s) recorded in some runs only; not compared")
    extra: RunOutcome | None = None
    if o.rerun and analysis.deterministic_causes:
        extra = extra_run()
        if extra.failed:
            warnings.append("the extra run with an equal hash seed failed; variation not determined")
        else:
            analysis = _with_variation(analysis, outcomes[0], extra)
    report = dataclasses.replace(report, analysis=analysis, rerun=extra, warnings=tuple(warnings))
    if report.nothing_compared is not None:
        # The script's own warnings say why (tracing off, an early exit): show them.
        tail = outcomes[0].stderr_tail.strip()
        extra_lines = [f"run 1 wrote on stderr:\n{tail}"] if tail else []
        report = dataclasses.replace(report, warnings=(*warnings, report.nothing_compared, *extra_lines))
    return report


def _with_variation(analysis: Analysis, first: RunOutcome, extra: RunOutcome) -> Analysis:
    """Each cause: ``PYTHONHASHSEED`` when the equal-seed run reproduces it, else ``every run``."""
    from cachetool.determinism.analysis import align
    from cachetool.fingerprint.diff import seeded

    rows, _ = align([first.events, extra.events])
    twin_of = {row[0]: row[1] for row in rows}

    def varied(cause: Cause) -> Cause:
        position = cause.step.positions[0]
        if cause.kind in ("random", "cache-state") or position not in twin_of:
            return cause
        twin, own = extra.events[twin_of[position]], first.events[position]
        if cause.kind == "file-name":  # the same fingerprint: do the names differ again?
            return dataclasses.replace(
                cause, variation="every run" if twin.named_files != own.named_files else "PYTHONHASHSEED"
            )
        if twin.result != own.result:
            return dataclasses.replace(cause, variation="every run")
        # Nothing made at run time: no hint may say "different in each run".
        culprits = tuple(seeded(c) for c in cause.culprits)
        return dataclasses.replace(cause, variation="PYTHONHASHSEED", culprits=culprits)

    return dataclasses.replace(analysis, causes=tuple(varied(c) for c in analysis.causes))
