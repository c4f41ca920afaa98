"""Run a script N times in subprocesses that differ on purpose and compare their fingerprints.

Each run is ``python -m cachetool run script.py [args]`` with its own ``PYTHONHASHSEED`` and its
own events file (``CACHETOOL_TRACE_EVENTS``, with hash trees: ``CACHETOOL_TRACE_TREES=1``). By
default the runs use the cache the script would use anyway, one after the other: fingerprints are
computed before any cache lookup, so a warm cache cannot hide a difference. ``isolated=True`` gives
each run a fresh temporary ``HF_DATASETS_CACHE`` (removed afterwards) and runs them in parallel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachetool.determinism.analysis import Analysis, Cause, align, analyze
from cachetool.determinism.checkpoint import COLD_ENV, EVENTS_ENV, SEED_ENV, TREES_ENV
from cachetool.errors import CachetoolError, ExitCode

__all__ = ["DeterminismReport", "RunOutcome", "check_determinism", "read_events", "run_command"]

REPORT_VERSION = 1
_STDERR_TAIL_LINES = 20


@dataclass(frozen=True)
class RunOutcome:
    """One run of the script: how it ended and the events it recorded."""

    index: int
    hash_seed: int
    returncode: int | None
    timed_out: bool
    duration: float
    events: tuple[dict[str, Any], ...]
    stderr_tail: str
    isolated_cache: bool = False
    #: A cold run: every transform computed (caching disabled), nothing loaded from the cache.
    cold: bool = False

    @property
    def failed(self) -> bool:
        return self.timed_out or self.returncode != 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "hash_seed": self.hash_seed,
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration, 3),
            "events": len(self.events),
            "isolated_cache": self.isolated_cache,
            "cold": self.cold,
            "stderr_tail": self.stderr_tail if self.failed else None,
        }


@dataclass(frozen=True)
class DeterminismReport:
    """The result of `check_determinism`: runs, aligned steps, causes with culprits, the exit code."""

    script: str
    args: tuple[str, ...]
    isolated: bool
    runs: tuple[RunOutcome, ...]
    analysis: Analysis | None
    #: The extra run with the first run's hash seed, made to tell which variation causes a difference.
    rerun: RunOutcome | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failed_run(self) -> RunOutcome | None:
        """The first run that failed or timed out, if any."""
        for run in self.runs:
            if run.failed:
                return run
        return None

    @property
    def exit_code(self) -> ExitCode:
        """0 every fingerprint matched; 1 one differs; 2 the script failed; 3 only random fallbacks."""
        if self.failed_run is not None or self.analysis is None:
            return ExitCode.USAGE
        if self.analysis.deterministic_causes:
            return ExitCode.PROBLEMS_FOUND
        if self.analysis.random_causes:
            return ExitCode.RANDOM_FINGERPRINT
        return ExitCode.OK

    @property
    def verdict(self) -> str:
        return {
            ExitCode.OK: "deterministic",
            ExitCode.PROBLEMS_FOUND: "not deterministic",
            ExitCode.USAGE: "script failed",
            ExitCode.RANDOM_FINGERPRINT: "random fingerprint",
        }.get(self.exit_code, "unknown")

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON form (``--json``); see README, "check-determinism JSON"."""
        analysis = self.analysis
        return {
            "version": REPORT_VERSION,
            "script": self.script,
            "args": list(self.args),
            "exit_code": int(self.exit_code),
            "verdict": self.verdict,
            "variations": {
                "hash_seeds": [r.hash_seed for r in self.runs],
                "isolated_cache": self.isolated,
            },
            "runs": [r.to_dict() for r in self.runs],
            "rerun": self.rerun.to_dict() if self.rerun is not None else None,
            "transforms": [s.to_dict() for s in analysis.steps] if analysis else [],
            "unaligned_events": analysis.unaligned if analysis else 0,
            "differences": [c.to_dict() for c in analysis.deterministic_causes] if analysis else [],
            "random_fingerprints": [c.to_dict() for c in analysis.random_causes] if analysis else [],
            "masked_differences": [c.to_dict() for c in analysis.masked] if analysis else [],
            "warnings": list(self.warnings),
        }


def run_command(script: str, args: Sequence[str], launcher: Sequence[str] | None = None) -> list[str]:
    """The command line of one run: the script under cachetool's tracing (what
    ``python -m cachetool run script.py args`` executes, without the CLI hop), or
    ``[*launcher, script, *args]`` when a launcher is given."""
    if launcher is not None:
        return [*launcher, script, *args]
    try:
        from cachetool.trace.runner import command
    except ImportError:
        return [sys.executable, "-m", "cachetool", "run", script, *args]
    return command(script, list(args))


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of one run, in file order; a torn last line (a killed run) is skipped."""
    events: list[dict[str, Any]] = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return events
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    # Tracer and checkpoint events share one sequence; writers may buffer differently.
    if all(isinstance(e.get("seq"), int) for e in events):
        events.sort(key=lambda e: e["seq"])
    return events


def _tail(path: Path, lines: int = _STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _run_once(
    index: int,
    script: Path,
    args: Sequence[str],
    hash_seed: int,
    workdir: Path,
    *,
    timeout: float | None,
    isolated: bool,
    launcher: Sequence[str] | None,
    cwd: Path,
    env: Mapping[str, str],
    live: set[subprocess.Popen[bytes]] | None = None,
    cold: bool = False,
) -> RunOutcome:
    run_dir = workdir / f"run-{index}"
    run_dir.mkdir(parents=True, exist_ok=True)
    events_path = run_dir / "events.jsonl"
    stderr_path = run_dir / "stderr.txt"
    run_env = dict(env)
    run_env[SEED_ENV] = env.get("PYTHONHASHSEED", "")  # the script gets the user's own back
    run_env["PYTHONHASHSEED"] = str(hash_seed)
    run_env[EVENTS_ENV] = str(events_path)
    run_env[TREES_ENV] = "1"
    if cold:
        run_env[COLD_ENV] = "1"
    if isolated:
        cache = run_dir / "hf-datasets-cache"
        cache.mkdir()
        run_env["HF_DATASETS_CACHE"] = str(cache)
    start = time.monotonic()
    timed_out = False
    returncode: int | None
    with open(stderr_path, "wb") as err, open(run_dir / "stdout.txt", "wb") as out:
        proc = subprocess.Popen(
            run_command(str(script), args, launcher),
            cwd=cwd,
            env=run_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        if live is not None:
            live.add(proc)
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            returncode = None
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            if live is not None:
                live.discard(proc)
    duration = time.monotonic() - start
    outcome = RunOutcome(
        index=index,
        hash_seed=hash_seed,
        returncode=returncode,
        timed_out=timed_out,
        duration=duration,
        events=tuple(read_events(events_path)),
        stderr_tail=_tail(stderr_path),
        isolated_cache=isolated,
        cold=cold,
    )
    if isolated:
        shutil.rmtree(run_dir / "hf-datasets-cache", ignore_errors=True)
    return outcome


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the run and anything it started (a num_proc pool): it runs in its own session."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


class BadScript(CachetoolError):
    """The script to check does not exist."""

    def __init__(self, script: Path) -> None:
        super().__init__(f"script not found: {script}")
        self.script = script


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
) -> DeterminismReport:
    """Run `script` `runs` times with distinct hash seeds, compare every fingerprint, explain the first.

    `hash_seeds` fixes the seeds (its length sets the number of runs); the default is ``1..runs``, so
    a verdict is reproducible. `isolated` gives each run a fresh temporary cache and runs up to
    `jobs` of them at once (default: as many as there are runs and cores). When a difference is
    found and `rerun` is true, one more run with the first run's seed tells whether the difference
    depends on ``PYTHONHASHSEED`` or changes on every run. `launcher` replaces the traced
    interpreter (``[sys.executable]`` runs the script plainly: only `cachetool.checkpoint` events).

    Mirrors ``cachetool check-determinism`` (``--runs``, ``--hash-seeds``, ``--timeout``,
    ``--isolated``, ``--jobs``).
    """
    script_path = Path(script)
    if not script_path.is_file():
        raise BadScript(script_path)
    seeds = list(hash_seeds) if hash_seeds else list(range(1, runs + 1))
    if len(seeds) < 2:
        raise CachetoolError("need at least 2 runs to compare (--runs 2 or --hash-seeds 1,2)")
    if any(not 0 <= s <= 4294967295 for s in seeds):
        raise CachetoolError("hash seeds must be integers from 0 to 4294967295")
    work_cwd = Path(cwd) if cwd is not None else Path.cwd()
    # As the user typed it (sys.argv[0] of a plain run), unless the runs start somewhere else.
    run_script = script_path if cwd is None else script_path.resolve()
    run_env = dict(os.environ if env is None else env)
    workers = 1
    if isolated:
        workers = max(1, min(len(seeds), jobs or (os.cpu_count() or 1)))

    # Runs start in their own sessions (a timeout stops a whole num_proc pool), so Ctrl-C does not
    # reach them: every live run is stopped here when this process is interrupted.
    live: set[subprocess.Popen[bytes]] = set()
    with tempfile.TemporaryDirectory(prefix="cachetool-determinism-") as tmp:
        workdir = Path(tmp)

        def one(index: int, seed: int) -> RunOutcome:
            # On the user's cache, the first run computes every step (caching disabled, its files go
            # to a temporary folder) and the next ones use the cache as it is: a step whose result
            # depends on whether an earlier one was computed or loaded shows even on a warm cache.
            # Isolated runs start from empty caches: they compute everything anyway.
            return _run_once(
                index,
                run_script,
                args,
                seed,
                workdir,
                timeout=timeout,
                isolated=isolated,
                launcher=launcher,
                cwd=work_cwd,
                env=run_env,
                live=live,
                cold=not isolated and index == 0,
            )

        outcomes: list[RunOutcome] = []
        if workers == 1:
            for i, seed in enumerate(seeds):
                outcome = one(i, seed)
                outcomes.append(outcome)
                if outcome.failed:
                    break  # no point running the others: the report is about the failure
        else:
            pool = ThreadPoolExecutor(max_workers=workers)
            try:
                outcomes = list(pool.map(one, range(len(seeds)), seeds))
            except BaseException:
                for proc in list(live):
                    _kill_group(proc)
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
        report = DeterminismReport(
            script=str(script),
            args=tuple(args),
            isolated=isolated,
            runs=tuple(outcomes),
            analysis=None,
        )
        if report.failed_run is not None:
            return report
        analysis = analyze([o.events for o in outcomes])
        warnings: list[str] = []
        if not any(o.events for o in outcomes):
            warnings.append(
                "no fingerprint was recorded: the script computed none (does it use datasets or "
                "cachetool.checkpoint?)"
            )
        if analysis.unaligned:
            warnings.append(
                f"{analysis.unaligned} event(s) happened in some runs only (the runs took different "
                "paths); they were not compared"
            )
        extra: RunOutcome | None = None
        if rerun and analysis.deterministic_causes:
            extra = one(len(seeds), seeds[0])
            if extra.failed:
                warnings.append("the extra run with an equal hash seed failed; variation not determined")
            else:
                analysis = _with_variation(analysis, outcomes[0], extra)
        return DeterminismReport(
            script=str(script),
            args=tuple(args),
            isolated=isolated,
            runs=tuple(outcomes),
            analysis=analysis,
            rerun=extra,
            warnings=tuple(warnings),
        )


def _with_variation(analysis: Analysis, first: RunOutcome, extra: RunOutcome) -> Analysis:
    """Mark each cause ``PYTHONHASHSEED`` when the equal-seed run reproduces the first run's
    fingerprint there, else ``every run``."""
    from dataclasses import replace

    rows, _ = align([first.events, extra.events])
    twin_of = {row[0]: row[1] for row in rows}
    causes: list[Cause] = []
    for cause in analysis.causes:
        position = cause.step.positions[0]
        if cause.kind in ("random", "cache-state") or position not in twin_of:
            causes.append(cause)
            continue
        same = extra.events[twin_of[position]].get("result") == first.events[position].get("result")
        causes.append(replace(cause, variation="PYTHONHASHSEED" if same else "every run"))
    return replace(analysis, causes=tuple(causes))
