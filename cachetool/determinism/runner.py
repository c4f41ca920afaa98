"""Run a script N times in subprocesses that differ on purpose and compare their fingerprints.

Each run is ``python -m cachetool run script.py [args]`` with its own ``PYTHONHASHSEED`` and its
own events file (``CACHETOOL_TRACE_EVENTS``, with hash trees: ``CACHETOOL_TRACE_TREES=1``). By
default the runs use the cache the script would use anyway, one after the other; the first computes
every step (``CACHETOOL_TRACE_COLD=1``: caching disabled, nothing read from or written to the cache)
so that a step changing an object that a later step hashes shows even when the cache is warm
(fingerprints themselves are computed before any cache lookup). ``isolated=True`` gives each run a
fresh temporary ``HF_DATASETS_CACHE`` (removed afterwards) and runs them in parallel.

The pieces: `process` (a run's processes and output), `events` (its events file, typed),
`analysis` (the comparison), `cleanup` (what a stopped check leaves), `report` (the result).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cachetool.determinism.analysis import Analysis, Cause, align, analyze
from cachetool.determinism.checkpoint import COLD_ENV, EVENTS_ENV, SEED_ENV, TREES_ENV
from cachetool.determinism.cleanup import (
    WORKDIR_PREFIX,
    CheckInterrupted,
    Leftovers,
    cache_root,
    terminate_as_interrupt,
)
from cachetool.determinism.events import load_events, read_events
from cachetool.determinism.process import (
    OUTPUT_CAP,
    RUN_MARKER_ENV,
    Tail,
    kill_group,
    marked_pids,
    stop_marked,
    tail_lines,
    terminal_lines,
)
from cachetool.determinism.report import DeterminismReport, RunOutcome, RunProgress
from cachetool.errors import CachetoolError

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


def run_command(script: str, args: Sequence[str], launcher: Sequence[str] | None = None) -> list[str]:
    """The command line of one run: the script under cachetool's tracing (what
    ``python -m cachetool run script.py args`` executes, without the CLI hop), or
    ``[*launcher, script, *args]`` when a launcher is given."""
    if launcher is not None:
        return [*launcher, script, *args]
    from cachetool.trace.runner import command

    return command(script, list(args))


class BadScript(CachetoolError):
    """The script to check does not exist."""

    def __init__(self, script: Path) -> None:
        super().__init__(f"script not found: {script}")
        self.script = script


@dataclass(frozen=True)
class _Settings:
    """The arguments of `check_determinism`, checked."""

    script: str
    run_script: Path
    args: tuple[str, ...]
    seeds: tuple[int, ...]
    timeout: float | None
    isolated: bool
    workers: int
    rerun: bool
    cwd: Path
    env: Mapping[str, str]
    launcher: Sequence[str] | None
    progress: Callable[[RunProgress], None] | None
    cold: bool


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
        # As the user typed it (sys.argv[0] of a plain run), unless the runs start somewhere else.
        run_script=script_path if cwd is None else script_path.resolve(),
        args=tuple(args),
        seeds=seeds,
        timeout=timeout or None,
        isolated=isolated,
        workers=max(1, min(len(seeds), jobs or (os.cpu_count() or 1))) if isolated else 1,
        rerun=rerun,
        cwd=Path(cwd) if cwd is not None else Path.cwd(),
        env=dict(os.environ if env is None else env),
        launcher=launcher,
        progress=progress,
        cold=cold,
    )


class _Run:
    """One run of the script: its folder, environment and processes, from start to outcome."""

    def __init__(
        self,
        settings: _Settings,
        workdir: Path,
        index: int,
        seed: int,
        live: dict[subprocess.Popen[bytes], str],
    ) -> None:
        self.settings, self.index, self.seed, self.live = settings, index, seed, live
        # On the user's cache, the first run computes every step (caching disabled, its files go
        # to a temporary folder) and the next ones use the cache as it is: a step whose result
        # depends on whether an earlier one was computed or loaded shows even on a warm cache.
        # Isolated runs start from empty caches: they compute everything anyway.
        self.cold = settings.cold and not settings.isolated and index == 0
        self.dir = workdir / f"run-{index}"
        self.events = self.dir / "events.jsonl"
        self.marker = f"{os.getpid()}-{index}-{os.urandom(6).hex()}"

    def _env(self) -> dict[str, str]:
        env = dict(self.settings.env)
        env[SEED_ENV] = env.get("PYTHONHASHSEED", "")  # the script gets the user's own back
        env["PYTHONHASHSEED"] = str(self.seed)
        env[EVENTS_ENV] = str(self.events)
        env[TREES_ENV] = "1"
        if self.cold:
            env[COLD_ENV] = "1"
        if self.settings.isolated:
            cache = self.dir / "hf-datasets-cache"
            cache.mkdir()
            env["HF_DATASETS_CACHE"] = str(cache)
        env[RUN_MARKER_ENV] = self.marker
        return env

    def run(self) -> RunOutcome:
        with _watching(self.settings.progress, self.events, self.index, self.seed, self.cold):
            return self._run()

    def _run(self) -> RunOutcome:
        s = self.settings
        self.dir.mkdir(parents=True, exist_ok=True)
        env = self._env()
        start = time.monotonic()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            proc = subprocess.Popen(
                run_command(str(s.run_script), s.args, s.launcher),
                cwd=s.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,
            )
        finally:
            os.close(out_w)
            os.close(err_w)
        out_tail, err_tail = Tail(out_r), Tail(err_r)
        self.live[proc] = self.marker
        timed_out, stopped = False, 0
        returncode: int | None
        try:
            returncode = proc.wait(timeout=s.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
            stopped = 1 + stop_marked(self.marker)
            returncode = None
        except BaseException:
            kill_group(proc)
            stop_marked(self.marker)
            raise
        finally:
            self.live.pop(proc, None)
        duration = time.monotonic() - start
        out_tail.finish(self.dir / "stdout.txt")
        err = err_tail.finish(self.dir / "stderr.txt")
        read = load_events(self.events)
        if s.isolated:
            shutil.rmtree(self.dir / "hf-datasets-cache", ignore_errors=True)
        return RunOutcome(
            index=self.index,
            hash_seed=self.seed,
            returncode=returncode,
            timed_out=timed_out,
            duration=duration,
            events=read.events,
            stderr_tail=tail_lines(err),
            isolated_cache=s.isolated,
            stopped=stopped,
            output_bytes=out_tail.total + err_tail.total,
            cold=self.cold,
            event_warnings=read.warnings,
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
    a verdict is reproducible. `isolated` gives each run a fresh temporary cache and runs up to
    `jobs` of them at once (default: as many as there are runs and cores). When a difference is
    found and `rerun` is true, one more run with the first run's seed tells whether the difference
    depends on ``PYTHONHASHSEED`` or changes on every run. `launcher` replaces the traced
    interpreter (``[sys.executable]`` runs the script plainly: only `cachetool.checkpoint` events).
    `progress` is called about twice a second per running run (the steps it recorded so far) and
    once when it ends. With `cold` (the default) the first run of a shared cache computes every
    step (caching off for it), so a step whose function changes what a later step hashes shows
    even on a warm cache; ``cold=False`` saves that recomputation.

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
    # Runs start in their own sessions (a timeout stops a whole num_proc pool), so Ctrl-C does not
    # reach them: every live run is stopped here when this process is interrupted or terminated,
    # and what the runs left (their temp folder, tmp files in the cache) is removed.
    live: dict[subprocess.Popen[bytes], str] = {}
    leftovers = Leftovers(None if s.isolated else cache_root(s.env), s.env)
    started = time.time()
    with (
        terminate_as_interrupt(),
        tempfile.TemporaryDirectory(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-") as tmp,
    ):
        workdir = Path(tmp)

        def one(index: int, seed: int) -> RunOutcome:
            return _Run(s, workdir, index, seed, live).run()

        try:
            outcomes = _run_all(s, one, live)
        except BaseException as e:
            raise CheckInterrupted(e, leftovers.remove(started, workdir), workdir) from None
        warnings = _run_warnings(outcomes, leftovers, started, workdir)
        report = DeterminismReport(
            script=s.script, args=s.args, isolated=s.isolated, runs=tuple(outcomes), analysis=None
        )
        if report.failed_run is not None:
            return dataclasses.replace(report, warnings=tuple(warnings))
        return _compared(s, report, warnings, lambda: one(len(s.seeds), s.seeds[0]))


def _run_all(
    s: _Settings, one: Callable[[int, int], RunOutcome], live: dict[subprocess.Popen[bytes], str]
) -> list[RunOutcome]:
    """Every run: one after the other on a shared cache (stopping at the first failure: the
    report is about it), or up to `workers` at once on isolated caches."""
    if s.workers == 1:
        outcomes: list[RunOutcome] = []
        for i, seed in enumerate(s.seeds):
            outcomes.append(one(i, seed))
            if outcomes[-1].failed:
                break
        return outcomes
    pool = ThreadPoolExecutor(max_workers=s.workers)
    try:
        return list(pool.map(one, range(len(s.seeds)), s.seeds))
    finally:
        for proc, marker in list(live.items()):
            kill_group(proc)
            stop_marked(marker)
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
    s: _Settings, report: DeterminismReport, warnings: list[str], extra_run: Callable[[], RunOutcome]
) -> DeterminismReport:
    """The report of runs that all finished: their analysis, checked again by one more run with the
    first run's seed when a difference is found (`rerun`), and why nothing was compared if so."""
    outcomes = report.runs
    analysis = analyze([o.events for o in outcomes])
    # A cold run's internal calls inside the steps it computed are not another path.
    apart = analysis.unaligned - analysis.unaligned_internal
    if apart:
        unreadable = any(o.event_warnings for o in outcomes)
        warnings.append(
            f"{apart} event(s) happened in some runs only (the runs took different "
            + ("paths, or some events could not be read" if unreadable else "paths")
            + "); they were not compared"
        )
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


class _watching:
    """While a run goes, report its progress (the lines of its events file) from a thread."""

    def __init__(
        self, progress: Callable[[RunProgress], None] | None, events: Path, index: int, seed: int, cold: bool
    ) -> None:
        self.progress = progress
        self.events = events
        self.index, self.seed, self.cold = index, seed, cold
        self.stop = threading.Event()
        self.start = time.monotonic()
        self.thread: threading.Thread | None = None

    def report(self, finished: bool) -> None:
        if self.progress is None:
            return
        try:
            steps = self.events.read_bytes().count(b"\n")
        except OSError:
            steps = 0
        try:
            self.progress(
                RunProgress(self.index, self.seed, self.cold, steps, time.monotonic() - self.start, finished)
            )
        except Exception:  # a display problem never stops the check
            self.progress = None

    def __enter__(self) -> _watching:
        if self.progress is not None:

            def loop() -> None:
                while not self.stop.wait(0.5):
                    self.report(False)

            self.thread = threading.Thread(target=loop, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            self.report(True)


def _with_variation(analysis: Analysis, first: RunOutcome, extra: RunOutcome) -> Analysis:
    """Mark each cause ``PYTHONHASHSEED`` when the equal-seed run reproduces the first run's
    fingerprint there, else ``every run``."""
    rows, _ = align([first.events, extra.events])
    twin_of = {row[0]: row[1] for row in rows}
    causes: list[Cause] = []
    for cause in analysis.causes:
        position = cause.step.positions[0]
        if cause.kind in ("random", "cache-state") or position not in twin_of:
            causes.append(cause)
            continue
        same = extra.events[twin_of[position]].result == first.events[position].result
        causes.append(dataclasses.replace(cause, variation="PYTHONHASHSEED" if same else "every run"))
    return dataclasses.replace(analysis, causes=tuple(causes))
