"""The result of a determinism check: each run's outcome, the analysis, the verdict and exit code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cachetool.determinism.events import Event
from cachetool.determinism.model import Analysis, Step
from cachetool.errors import ExitCode

__all__ = ["REPORT_VERSION", "DeterminismReport", "RunOutcome", "RunProgress", "Verdict"]

REPORT_VERSION = 1

Verdict = Literal[
    "deterministic", "not deterministic", "nothing compared", "script failed", "random fingerprint"
]

#: Why no fingerprint was compared: the runs took different paths, or none recorded one.
NothingCompared = Literal["different paths", "no fingerprint"]


@dataclass(frozen=True)
class RunOutcome:
    """One run of the script: how it ended and the events it recorded."""

    index: int
    hash_seed: int
    returncode: int | None
    timed_out: bool
    duration: float
    events: tuple[Event, ...]
    stderr_tail: str
    isolated_cache: bool = False
    #: Processes of the run still alive when it ended (timeout), stopped with SIGKILL.
    stopped: int = 0
    #: Bytes the script wrote to stdout and stderr (only the last OUTPUT_CAP of each are kept).
    output_bytes: int = 0
    #: A cold run: every transform computed, nothing loaded from the cache (what the cache lacked
    #: it wrote there; the files the cache held it left alone).
    cold: bool = False
    #: Lines of the run's events file that could not be read (skipped, so not compared).
    event_warnings: tuple[str, ...] = ()
    #: Isolated runs: the run (0-based) whose cache this one used as that one left it, so that it
    #: loads what that one computed; None: a cache of its own (or the shared one).
    cache_of: int | None = None

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
            "stopped_processes": self.stopped,
            "output_bytes": self.output_bytes,
            "cache_of": self.cache_of + 1 if self.cache_of is not None else None,
        }


@dataclass(frozen=True)
class RunProgress:
    """Where one run is, for a progress display: reported about twice a second while it runs."""

    index: int
    hash_seed: int
    cold: bool
    steps: int
    elapsed: float
    finished: bool


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
    def nothing_compared_reason(self) -> NothingCompared | None:
        """Why no fingerprint was compared (None when some were, or a run failed): not a pass."""
        if self.failed_run is not None or self.analysis is None or self.analysis.steps:
            return None
        return "different paths" if self.analysis.unaligned else "no fingerprint"

    @property
    def nothing_compared(self) -> str | None:
        """`nothing_compared_reason` in words."""
        reason = self.nothing_compared_reason
        if reason is None:
            return None
        if reason == "different paths":
            assert self.analysis is not None
            return (
                f"nothing was compared: the runs took different paths ({self.analysis.unaligned} "
                "event(s) in some runs only)"
            )
        return (
            "nothing was compared: no run recorded a fingerprint (tracing was off, the script does "
            "not use datasets or cachetool.checkpoint, or it exited before its first transform)"
        )

    @property
    def uncached(self) -> tuple[tuple[Step, str], ...]:
        """The steps the user made that ran without a persistent cache (an in-memory dataset's
        maps, ``keep_in_memory=True``, ...), with the reason the last warm run recorded: they run
        again in every session whatever the check says (a note; the exit code does not change)."""
        analysis = self.analysis
        warm = [k for k, run in enumerate(self.runs) if not run.cold]
        if analysis is None or not warm:
            return ()
        k = warm[-1]
        out: list[tuple[Step, str]] = []
        for step in analysis.steps:
            if step.internal or k >= len(step.positions):
                continue
            reason = self.runs[k].events[step.positions[k]].uncached
            if reason is not None:
                out.append((step, reason))
        return tuple(out)

    @property
    def exit_code(self) -> ExitCode:
        """0 every fingerprint matched; 1 one differs; 2 the script failed or nothing was
        compared; 3 only random fallbacks."""
        if self.failed_run is not None or self.analysis is None or self.nothing_compared_reason:
            return ExitCode.USAGE
        if self.analysis.deterministic_causes:
            return ExitCode.PROBLEMS_FOUND
        if self.analysis.random_causes:
            return ExitCode.RANDOM_FINGERPRINT
        return ExitCode.OK

    @property
    def verdict(self) -> Verdict:
        code = self.exit_code
        if code == ExitCode.PROBLEMS_FOUND:
            return "not deterministic"
        if code == ExitCode.RANDOM_FINGERPRINT:
            return "random fingerprint"
        if code == ExitCode.USAGE:
            return "nothing compared" if self.nothing_compared_reason else "script failed"
        return "deterministic"

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
            "unobserved": [c.to_dict() for c in analysis.unobserved] if analysis else [],
            "one_run_only": [u.to_dict() for u in analysis.one_run_only] if analysis else [],
            "uncached": [{"step": step.index, "reason": reason} for step, reason in self.uncached],
            "warnings": list(self.warnings),
            "nothing_compared": self.nothing_compared,
        }
