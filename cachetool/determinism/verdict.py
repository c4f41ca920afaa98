"""The result of a determinism check: each run's events, the aligned steps and the causes found,
the verdict and the exit code; and its text forms (human lines, GitHub Actions annotations).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from cachetool.errors import ExitCode
from cachetool.fingerprint.diff import (
    ORDER_HINTS,
    PREDICTABLE_FALLBACK,
    PREDICTABLE_HINT,
    Culprit,
    Unpicklable,
)
from cachetool.history.ledger import parse_record, read_segment
from cachetool.history.records.base import BadRecord
from cachetool.history.records.steps import StepRecord
from cachetool.safejson import json_fields, json_value

#: One event: a step (transform, root, save, checkpoint) as one run recorded it.
Event = StepRecord


@dataclass(frozen=True)
class EventsFile:
    """The events of one run in `seq` order, and the lines that could not be read."""

    events: tuple[Event, ...] = ()
    warnings: tuple[str, ...] = ()


def load_events(path: str | os.PathLike[str]) -> EventsFile:
    """The events of one run in `seq` order (writers may buffer differently), with a warning per line
    skipped; no file: nothing recorded. Other records (a source text, a run's start) are left out."""
    if not os.path.lexists(path):
        return EventsFile()
    warnings: list[str] = []
    events = [r for r in read_segment(Path(path), warnings) if isinstance(r, StepRecord)]
    events.sort(key=lambda e: e.seq)
    return EventsFile(tuple(events), tuple(warnings))


def as_events(run: Iterable[Event | Mapping[str, Any]]) -> tuple[Event, ...]:
    """Events given as records or as the decoded JSON objects of an events file (a missing ``v``
    is version 1), parsed once. `BadRecord` says which object is not a step."""
    out: list[Event] = []
    for i, item in enumerate(run):
        record = item if isinstance(item, StepRecord) else parse_record({"v": 1, **item})
        if not isinstance(record, StepRecord):
            raise BadRecord(f"event {i}: a {record.type} record, not a step")
        out.append(record)
    return tuple(out)


#: A step's part in the story: ``same`` (every run agrees), ``cause`` (differs while its inputs do
#: not), ``cascade`` (differs because an earlier cause did), ``source`` (a differing input) or
#: ``random`` (datasets fell back to a random fingerprint); the last two are causes too.
StepStatus = Literal["same", "cause", "cascade", "source", "random"]

#: ``arguments`` (a hashed argument differs), ``source`` (the input dataset differs), ``random``
#: (datasets used a random fingerprint), ``given`` (the caller passed a ``new_fingerprint=`` that
#: differs), ``cache-state`` (an argument holds an object an earlier step changed while it ran),
#: ``unexplained`` (no recorded argument differs), ``file-name`` (the fingerprint is the same, but
#: the script names the step's cache file anew in each run: no run finds the last one's file).
CauseKind = Literal["arguments", "source", "random", "given", "cache-state", "unexplained", "file-name"]

#: ``PYTHONHASHSEED`` (equal hash seeds give equal fingerprints), ``every run``, ``cache state``
#: (computed or loaded from the cache upstream).
Variation = Literal["PYTHONHASHSEED", "every run", "cache state"]


def _where(file: str | None, line: int | None) -> str | None:
    """``file:line`` (``file`` without a line), None without a file."""
    return (f"{file}:{line}" if line is not None else file) if file else None


@dataclass(frozen=True)
class Step:
    """One aligned event: the same call in every run."""

    index: int
    #: The position of this step's event in each run's event list.
    positions: tuple[int, ...]
    type: str
    operation: str
    transform: str
    file: str | None
    line: int | None
    function: str | None
    internal: bool
    results: tuple[str | None, ...]
    #: One tuple of parent fingerprints per run.
    parents: tuple[tuple[str, ...], ...]
    #: Where the function passed to the transform is defined, when recorded.
    function_file: str | None = None
    function_line: int | None = None
    status: StepStatus = "same"
    #: For a cascade step: the index of its cause in `Analysis.causes`.
    cause: int | None = None
    #: The split the step made (``train``), when the runs recorded one.
    split: str | None = None

    @property
    def differs(self) -> bool:
        return len(set(self.results)) > 1

    @property
    def location(self) -> str:
        return _where(self.file, self.line) or "?"

    @property
    def function_defined(self) -> str | None:
        """Where the function passed to the transform is defined (``file:line``), when recorded."""
        return _where(self.function_file, self.function_line)

    @property
    def function_elsewhere(self) -> bool:
        """The function lives in another file than the call (a helper module)."""
        return bool(self.function_file) and self.file is not None and self.function_file != self.file

    def to_dict(self) -> dict[str, Any]:
        return {
            **json_fields(self, "index", "type", "operation", "transform"),
            "call_site": {"file": self.file, "line": self.line},
            **json_fields(self, "function", "function_defined", "internal"),
            "fingerprints": list(self.results),
            **json_fields(self, "parents", "status", "cause", "split"),
        }


class SourceDiff(NamedTuple):
    """Where the recorded descriptions of a source differ: a key (``data_files[a.csv].mtime``,
    ``column 'loaded_at' row 0``) and its value in each run."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Cause:
    """A fingerprint that differs between runs while its inputs do not (or a source that differs)."""

    step: Step
    kind: CauseKind
    differing_args: tuple[str, ...] = ()
    culprits: tuple[Culprit, ...] = ()
    unpicklable: tuple[Unpicklable, ...] = ()
    #: The exception text datasets swallowed, one per run that fell back (random causes).
    errors: tuple[str, ...] = ()
    #: Source causes: the recorded description of the source (builder, config, data dir, path,
    #: columns of an in-memory dataset) where it differs.
    source_diffs: tuple[SourceDiff, ...] = ()
    #: Source causes: some of those differences are columns of a dataset built in memory.
    columns_differ: bool = False
    cascade: int = 0
    #: How the fingerprint varies, or None (not checked).
    variation: Variation | None = None
    #: Cache-state causes: the earlier step that changed the object while it ran.
    changed_by: Step | None = None
    #: Random causes: a fallback from Python's global `random` that gave every run the same
    #: fingerprint (`random.seed`): another version of the step would load this result.
    predictable: bool = False
    #: File-name causes: each output file argument the script named differently in each run
    #: (``cache_file_name``) and its path in each run.
    file_names: tuple[SourceDiff, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        step, by = self.step, self.changed_by
        return {
            "kind": self.kind,
            "step": step.index,
            "call_site": {"file": step.file, "line": step.line},
            **json_fields(step, "operation", "transform", "function"),
            "fingerprints": list(step.results),
            "differing_arguments": list(self.differing_args),
            **json_fields(self, "culprits", "unpicklable", "errors"),
            "source_differences": {d.key: list(d.values) for d in self.source_diffs},
            **json_fields(self, "cascade", "variation", "predictable"),
            "file_names": {d.key: list(d.values) for d in self.file_names},
            "changed_by": None
            if by is None
            else {
                "step": by.index,
                "call_site": {"file": by.file, "line": by.line},
                **json_fields(by, "operation", "function"),
            },
        }


@dataclass(frozen=True)
class Unmatched:
    """A call the user made that some runs recorded and the others did not (not compared)."""

    #: The run (0-based) that recorded it.
    run: int
    operation: str
    file: str | None
    line: int | None
    function: str | None = None
    #: How many times those runs recorded it.
    count: int = 1

    @property
    def location(self) -> str:
        return _where(self.file, self.line) or "?"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run + 1,
            "operation": self.operation,
            "call_site": {"file": self.file, "line": self.line},
            **json_fields(self, "function", "count"),
        }


@dataclass(frozen=True)
class Analysis:
    """Everything compared: aligned steps, the causes in order, random fallbacks, unaligned events."""

    steps: tuple[Step, ...]
    causes: tuple[Cause, ...]
    #: Events of some run that have no counterpart in another run.
    unaligned: int = 0
    #: Random fallbacks on steps whose fingerprints all matched anyway.
    hidden_random: tuple[Cause, ...] = field(default_factory=tuple)
    #: Steps inside a cascade whose own arguments differ as well (hidden by an earlier cause).
    masked: tuple[Cause, ...] = field(default_factory=tuple)
    #: Calls the user made that some runs recorded and others did not.
    one_run_only: tuple[Unmatched, ...] = field(default_factory=tuple)
    #: Steps that hash an object an earlier step changed while it ran, where every run computed
    #: that step and all agree: whether a run that loads it agrees was not observed (a note).
    unobserved: tuple[Cause, ...] = field(default_factory=tuple)

    @property
    def differing(self) -> int:
        """The steps the user made whose fingerprint differs between runs."""
        return sum(1 for s in self.steps if s.differs and not s.internal)

    @property
    def deterministic_causes(self) -> tuple[Cause, ...]:
        """Causes that are real hashing differences (not random fallbacks)."""
        return tuple(c for c in self.causes if c.kind != "random")

    @property
    def random_causes(self) -> tuple[Cause, ...]:
        return tuple(c for c in self.causes if c.kind == "random") + self.hidden_random


REPORT_VERSION = 1

Verdict = Literal[
    "deterministic", "not deterministic", "nothing compared", "script failed", "random fingerprint"
]

_VERDICTS: dict[ExitCode, Verdict] = {
    ExitCode.OK: "deterministic",
    ExitCode.PROBLEMS_FOUND: "not deterministic",
    ExitCode.RANDOM_FINGERPRINT: "random fingerprint",
}


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
            **json_fields(self, "index", "hash_seed", "returncode", "timed_out"),
            "duration_s": round(self.duration, 3),
            "events": len(self.events),
            **json_fields(self, "isolated_cache", "cold"),
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
        return next((run for run in self.runs if run.failed), None)

    @property
    def nothing_compared(self) -> str | None:
        """Why no fingerprint was compared (None when some were, or a run failed): not a pass."""
        if self.failed_run is not None or self.analysis is None or self.analysis.steps:
            return None
        if self.analysis.unaligned:
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
        """The user's steps that ran without a persistent cache, with the reason the last warm run
        recorded (a note; the exit code does not change)."""
        warm = [k for k, run in enumerate(self.runs) if not run.cold]
        if self.analysis is None or not warm:
            return ()
        k = warm[-1]
        steps = [s for s in self.analysis.steps if not s.internal and k < len(s.positions)]
        found = ((s, self.runs[k].events[s.positions[k]].uncached) for s in steps)
        return tuple((s, reason) for s, reason in found if reason is not None)

    @property
    def exit_code(self) -> ExitCode:
        """0 every fingerprint matched; 1 one differs, or a random fallback repeats in every run;
        2 the script failed or nothing was compared; 3 only random fallbacks."""
        if self.failed_run is not None or self.analysis is None or self.nothing_compared:
            return ExitCode.USAGE
        if self.analysis.deterministic_causes or any(c.predictable for c in self.analysis.random_causes):
            return ExitCode.PROBLEMS_FOUND
        if self.analysis.random_causes:
            return ExitCode.RANDOM_FINGERPRINT
        return ExitCode.OK

    @property
    def verdict(self) -> Verdict:
        code = self.exit_code
        if code == ExitCode.USAGE:
            return "nothing compared" if self.nothing_compared else "script failed"
        return _VERDICTS[code]

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON form (``--json``); see README, "check-determinism JSON"."""
        a = self.analysis or Analysis((), ())
        return {
            "version": REPORT_VERSION,
            **json_fields(self, "script", "args"),
            "exit_code": int(self.exit_code),
            "verdict": self.verdict,
            "variations": {
                "hash_seeds": [r.hash_seed for r in self.runs],
                "isolated_cache": self.isolated,
            },
            **json_fields(self, "runs", "rerun"),
            "transforms": json_value(a.steps),
            "unaligned_events": a.unaligned,
            "differences": json_value(a.deterministic_causes),
            "random_fingerprints": json_value(a.random_causes),
            "masked_differences": json_value(a.masked),
            **json_fields(a, "unobserved", "one_run_only"),
            "uncached": [{"step": step.index, "reason": reason} for step, reason in self.uncached],
            **json_fields(self, "warnings", "nothing_compared"),
        }


# -- the report as text -------------------------------------------------------------------------


def _short(fp: str | None) -> str:
    return "-" if fp is None else fp[:16]


def _relative(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(".." + os.sep) else rel


def _what(cause: Cause) -> str:
    step = cause.step
    parts = [step.operation or step.type]
    if step.function:
        parts.append(step.function)
        if step.function_elsewhere and step.function_defined:
            # The function lives elsewhere (a helper module): say where to look.
            parts.append(f"(defined in {_relative(step.function_defined)})")
    elif step.type == "checkpoint":
        parts.append(repr(step.transform))
    return " ".join(parts)


_VARIATIONS = {
    "PYTHONHASHSEED": "depends on PYTHONHASHSEED (a run with an equal hash seed gave the same fingerprint)",
    "every run": "changes on every run (even with an equal hash seed)",
    "cache state": "depends on the cache state: it differs between a run that computed the earlier step "
    "and one that loaded it from the cache (a warm cache hides it; a cold one shows it)",
}


def _step_name(step: Step) -> str:
    what = f"{step.operation} {step.function}" if step.function else step.operation
    split = f" on split {step.split}" if step.split else ""
    return f"step {step.index + 1} ({what}{split} at {_relative(step.location)})"


def _source_lines(cause: Cause) -> list[str]:
    """A source that differs; when its inputs are the same in every run in another order (data
    files, the datasets it concatenates, a generator's paths), what is reordered and the fix."""
    configured = [a for a in cause.differing_args if a != "gen_kwargs"]
    if configured and cause.culprits and all(d.key == "relative_data_dir" for d in cause.source_diffs):
        # `features=`, a generator: hashed into the name of the source's cache folder.
        said = f"  {cause.step.operation} is configured differently in each run"
        return [f"{said} (its cache folder's name differs):", *_argument_lines(cause)]
    orders = [d for d in cause.source_diffs if d.key in ORDER_HINTS]
    culprits = [c for c in cause.culprits if c.kind in ("order", "set-order")]
    if orders or culprits:
        lines = ["  the same inputs, in another order in each run:"]
        lines += [f"  {d.key}: {' vs '.join(dict.fromkeys(d.values))}" for d in orders]
        lines += [f"  differs: {c.path_str}: {c.values_str}" for c in culprits]
        lines += [f"  hint: {ORDER_HINTS[d.key]}" for d in orders]
        return lines + [f"  hint: {c.hint}" for c in culprits]
    lines = ["  the source dataset differs between runs (no argument differs, the input does):"]
    if cause.columns_differ:
        lines.append(f"  the data given to {cause.step.operation} is built at run time.")
    else:
        lines.append("  an input file rewritten or touched between runs, or data built at run time.")
    lines += [f"  source {d.key}: {' vs '.join(dict.fromkeys(d.values))}" for d in cause.source_diffs]
    lines += [f"  differs: {c.path_str}: {c.values_str}" for c in cause.culprits]
    if any(d.key.endswith("].folder") for d in cause.source_diffs):
        lines.append(
            "  hint: the data files are read from another folder in each run (a new temporary "
            "folder?): load_dataset caches a source by its files' paths, so each run prepares it "
            "anew; read them from one folder."
        )
    elif cause.step.operation == "load_dataset" or any(
        d.key == "relative_data_dir" for d in cause.source_diffs
    ):
        lines.append(
            "  hint: load_dataset identifies local data files by path and modification time: a file "
            "rewritten before each run (even with the same content) is a new source; write it only "
            "when its content changes."
        )
    return lines


def _random_lines(cause: Cause) -> list[str]:
    said = (
        f"the same in every run ({PREDICTABLE_FALLBACK})"
        if cause.predictable
        else "the cache is never reused"
    )
    lines = [f"  datasets could not hash an argument and used a random fingerprint: {said}"]
    for piece in cause.unpicklable:
        lines.append(f"  cannot pickle: {piece.path_str} {piece.repr}")
        lines.append(f"  error: {piece.error}")
        lines.append(f"  hint: {PREDICTABLE_HINT if cause.predictable else piece.hint}")
    if not cause.unpicklable:
        for error in cause.errors:
            lines.append(f"  error: {error}")
        args = ", ".join(cause.differing_args) or "?"
        lines.append(f"  hint: make '{args}' picklable, or pass new_fingerprint= to the transform")
    return lines


def _origin(cause: Cause) -> str:
    return _step_name(cause.changed_by) if cause.changed_by is not None else "an earlier step"


def _changed_lines(culprit: Culprit) -> list[str]:
    return [f"  changed: {part.path_str}: {part.values_str}" for part in culprit.parts or (culprit,)]


def _state_lines(cause: Cause) -> list[str]:
    subject = (
        "the function's state"
        if "function" in cause.differing_args or not cause.differing_args
        else (f"the state of {', '.join(cause.differing_args)}")
    )
    lines = [
        f"  {subject} differs between a run that computed {_origin(cause)} and one that loaded it "
        "from the cache:",
        "  that step changes an object while it runs, and this step hashes the object again",
    ]
    for culprit in cause.culprits:
        lines += _changed_lines(culprit)
        if culprit.parts and len(culprit.leaves) > len(culprit.parts):
            lines.append(f"  ... and {len(culprit.leaves) - len(culprit.parts)} more changed")
        lines.append(f"  hint: {culprit.hint}")
    return lines


def _argument_lines(cause: Cause) -> list[str]:
    lines = [f"  differing argument(s): {', '.join(cause.differing_args)}"]
    for culprit in cause.culprits:
        if not culprit.parts:
            shown = culprit.values_str
            if len(shown) <= 60:  # fn_kwargs['seed'] (int): 4187 vs 912
                lines.append(f"  culprit: {culprit.path_str}: {shown}")
            else:
                lines.append(f"  culprit: {culprit.path_str}")
                lines.append(f"    {shown}")
            lines.append(f"  hint: {culprit.hint}")
            continue
        lines.append(f"  culprit: {culprit.path_str}")
        lines.append(f"  it differs in {len(culprit.leaves)} places:")
        for part in culprit.parts:
            lines.append(f"  - {part.path_str}: {part.values_str}")
            lines.append(f"    hint: {part.hint}")
        if len(culprit.leaves) > len(culprit.parts):
            lines.append(f"  - ... and {len(culprit.leaves) - len(culprit.parts)} more")
    if not cause.culprits:
        lines.append("  (no hash tree recorded for it: cannot say which part differs)")
    return lines


def _given_lines(cause: Cause) -> list[str]:
    name = "fingerprint" if cause.step.type == "root" else "new_fingerprint"  # `from_generator`
    return [
        f"  the fingerprint was given with {name}= and differs between runs",
        f"  hint: derive {name} from inputs that are the same in every run (not a clock or uuid)",
    ]


def _file_name_lines(cause: Cause) -> list[str]:
    names = [d.key for d in cause.file_names]
    what = "folder" if names == ["cache_dir"] else "file"  # load_dataset(cache_dir=)
    lines = [
        f"  the same fingerprint in every run, but the script names its cache {what} anew in each run: "
        f"a rerun looks for another {what}, never finds the one the last run wrote, and computes the "
        "step again"
    ]
    lines += [f"  {d.key}: {' vs '.join(dict.fromkeys(d.values))}" for d in cause.file_names]
    leave = (
        "leave cache_dir out (datasets' own cache)"
        if what == "folder"
        else f"leave {' and '.join(names)} to datasets (it names the file by the fingerprint)"
    )
    lines.append(
        f"  hint: name the {what} by a fixed path (not in a new temporary folder, nor with a time or a "
        f"uuid in its name), or {leave}; a step made from this one writes its files beside it, so it "
        "is computed again too."
    )
    return lines


_BY_KIND: dict[str, Callable[[Cause], list[str]]] = {
    "source": _source_lines,
    "random": _random_lines,
    "cache-state": _state_lines,
    "given": _given_lines,
    "file-name": _file_name_lines,
    "unexplained": lambda _: [
        "  no recorded argument differs; the difference is in what datasets hashed internally"
    ],
}


def _headline(cause: Cause, fingerprints: str) -> str:
    return f"{_relative(cause.step.location)}  {_what(cause)}: fingerprint {fingerprints}"


def cause_lines(cause: Cause) -> list[str]:
    """The explanation of one cause, as indented lines."""
    fps = " vs ".join(dict.fromkeys(_short(fp) for fp in cause.step.results))
    lines = [_headline(cause, fps)]
    lines += _BY_KIND.get(cause.kind, _argument_lines)(cause)
    if cause.variation:
        lines.append(f"  {_VARIATIONS[cause.variation]}")
    if cause.cascade:
        noun = "fingerprint differs" if cause.cascade == 1 else "fingerprints differ"
        lines.append(f"  {cause.cascade} downstream {noun} because of this")
    return lines


def unobserved_lines(cause: Cause) -> list[str]:
    """A step every run agrees on that hashes an object an earlier step changed, where every run
    computed that step: a note (not a cause: nothing was observed to differ)."""
    lines = [
        _headline(cause, f"{_short(cause.step.results[0])} in every run"),
        f"  note: it hashes an object that {_origin(cause)} changes while it runs, and every run here "
        "computed",
        "  that step: whether a run that loads it from the cache gives the same fingerprint was not seen",
    ]
    return lines + [line for culprit in cause.culprits for line in _changed_lines(culprit)]


def _uncached_lines(report: DeterminismReport) -> list[str]:
    """The note on steps without a persistent cache, worded as `explain` words it."""
    from cachetool.history.explain.answer import UNCACHED_HINT, UNCACHED_TEXT

    uncached = report.uncached
    if not uncached:
        return []
    n = len(uncached)
    lines = [
        "",
        f"note: {n} step{'' if n == 1 else 's'} ran without a persistent cache; "
        f"{'it runs' if n == 1 else 'they run'} again in every run, deterministic or not:",
    ]
    for step, reason in uncached:
        lines.append(f"  {_step_name(step)}: {UNCACHED_TEXT.get(reason, reason)}")
    lines.append(f"  {UNCACHED_HINT}")
    return lines


def human_lines(report: DeterminismReport) -> list[str]:
    """The whole report for a person (the CLI escapes and prints each line)."""
    seeds = ", ".join(str(r.hash_seed) for r in report.runs)
    mode = "isolated caches" if report.isolated else "shared cache"
    if any(r.cold for r in report.runs):
        mode += ", run 1 cold"
    for r in report.runs:
        if r.cache_of is not None:
            mode += f"; run {r.index + 1} on run {r.cache_of + 1}'s cache"
    n = len(report.runs)
    lines = [
        f"{report.script}: {report.verdict} ({n} run{'' if n == 1 else 's'}, PYTHONHASHSEED {seeds}; {mode})"
    ]
    failed = report.failed_run
    if failed is not None:
        how = (
            f"timed out after {failed.duration:.0f} s" if failed.timed_out else f"exited {failed.returncode}"
        )
        tail = (failed.stderr_tail or "").splitlines()
        said = "last lines of its stderr:" if tail else "it wrote nothing to stderr"
        lines.append(f"run {failed.index + 1} (PYTHONHASHSEED={failed.hash_seed}) {how}; {said}")
        lines.extend(f"  | {line}" for line in tail)
        return lines
    analysis = report.analysis
    if analysis is None:
        return lines
    # The steps the user made (datasets' internal ones repeat their caller's fingerprints).
    compared = sum(1 for s in analysis.steps if not s.internal)
    differing = analysis.differing
    for cause in (*analysis.deterministic_causes, *analysis.random_causes):
        lines += ["", *cause_lines(cause)]
    for cause in analysis.masked:
        lines += ["", "also differs on its own (inside the cascade above; it will show once that is fixed):"]
        lines += cause_lines(cause)
    for cause in analysis.unobserved:
        lines += ["", *unobserved_lines(cause)]
    lines.extend(_uncached_lines(report))
    lines.append("")
    summary = f"{compared} fingerprint(s) compared, {differing} differ"
    if analysis.deterministic_causes:
        summary += f"; {len(analysis.deterministic_causes)} cause(s)"
        named = sum(1 for c in analysis.deterministic_causes if c.kind == "file-name")
        if named:
            summary += f" ({named} a cache file named anew in each run)"
    if analysis.random_causes:
        summary += f"; {len(analysis.random_causes)} random fingerprint(s)"
    downstream = sum(c.cascade for c in analysis.causes)
    if downstream:
        summary += f", {downstream} downstream"
    lines.append(summary)
    if report.exit_code != 0:
        own = ",".join(str(r.hash_seed) for r in report.runs if r.cache_of is None)
        lines.append(f"reproduce: cachetool check-determinism {report.script} --hash-seeds {own}")
    return lines


_TITLES = {"random": "random fingerprint", "file-name": "cache file named anew in each run"}


def github_lines(report: DeterminismReport) -> list[str]:
    """``::error file=...,line=...::message`` workflow commands, one per cause (GitHub Actions)."""
    from cachetool.formatting import annotation

    out: list[str] = []
    failed = report.failed_run
    if failed is not None:
        tail = failed.stderr_tail.splitlines()[-1:] or [""]
        what = "timed out" if failed.timed_out else f"failed (exit {failed.returncode})"
        out.append(
            annotation("error", f"check-determinism: the script {what}: {tail[0]}", file=report.script)
        )
        return out
    analysis = report.analysis
    if analysis is None:
        return out
    if report.nothing_compared is not None:
        return [annotation("error", f"check-determinism: {report.nothing_compared}", file=report.script)]
    for cause in (*analysis.deterministic_causes, *analysis.random_causes):
        title = _TITLES.get(cause.kind, "fingerprint not deterministic")
        text = _what(cause) + ": " + ("\n".join(cause_lines(cause)[1:]) or _what(cause)).strip()
        file = os.path.relpath(cause.step.file) if cause.step.file else None
        out.append(annotation("error", text, file=file, line=cause.step.line, title=title))
    if not out:
        out.append(annotation("notice", f"{report.script}: every fingerprint matched"))
    return out
