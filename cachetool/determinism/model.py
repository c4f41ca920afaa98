"""What a comparison of N runs finds: aligned steps, causes and the analysis holding them.

Statuses, cause kinds and variations are `Literal`s: the text a person reads is rendered from them
(`cachetool.determinism.render`), never parsed back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from cachetool.fingerprint.diff import Culprit, Unpicklable

__all__ = ["Analysis", "Cause", "CauseKind", "SourceDiff", "Step", "StepStatus", "Unmatched", "Variation"]

#: A step's part in the story: ``same`` (every run agrees), ``cause`` (differs while its inputs do
#: not), ``cascade`` (differs because an earlier cause did), ``source`` (a differing input) or
#: ``random`` (datasets fell back to a random fingerprint); the last two are causes too.
StepStatus = Literal["same", "cause", "cascade", "source", "random"]

#: ``arguments`` (a hashed argument differs), ``source`` (the input dataset differs), ``random``
#: (datasets used a random fingerprint), ``given`` (the caller passed a ``new_fingerprint=`` that
#: differs), ``cache-state`` (an argument holds an object an earlier step changed while it ran),
#: ``unexplained`` (no recorded argument differs).
CauseKind = Literal["arguments", "source", "random", "given", "cache-state", "unexplained"]

#: ``PYTHONHASHSEED`` (equal hash seeds give equal fingerprints), ``every run``, ``cache state``
#: (computed or loaded from the cache upstream).
Variation = Literal["PYTHONHASHSEED", "every run", "cache state"]


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
        if self.file is None:
            return "?"
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    @property
    def function_defined(self) -> str | None:
        """Where the function passed to the transform is defined (``file:line``), when recorded."""
        if not self.function_file:
            return None
        return (
            f"{self.function_file}:{self.function_line}"
            if self.function_line is not None
            else self.function_file
        )

    @property
    def function_elsewhere(self) -> bool:
        """The function lives in another file than the call (a helper module)."""
        return bool(self.function_file) and self.file is not None and self.function_file != self.file

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "type": self.type,
            "operation": self.operation,
            "transform": self.transform,
            "call_site": {"file": self.file, "line": self.line},
            "function": self.function,
            "function_defined": self.function_defined,
            "internal": self.internal,
            "fingerprints": list(self.results),
            "parents": [list(p) for p in self.parents],
            "status": self.status,
            "cause": self.cause,
            "split": self.split,
        }


#: The keys of a `SourceDiff` that says a source's inputs come in another order in each run.
ORDER_KEYS = ("data_files order", "inputs order")


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "step": self.step.index,
            "call_site": {"file": self.step.file, "line": self.step.line},
            "operation": self.step.operation,
            "transform": self.step.transform,
            "function": self.step.function,
            "fingerprints": list(self.step.results),
            "differing_arguments": list(self.differing_args),
            "culprits": [c.to_dict() for c in self.culprits],
            "unpicklable": [u.to_dict() for u in self.unpicklable],
            "errors": list(self.errors),
            "source_differences": {d.key: list(d.values) for d in self.source_diffs},
            "cascade": self.cascade,
            "variation": self.variation,
            "changed_by": None
            if self.changed_by is None
            else {
                "step": self.changed_by.index,
                "call_site": {"file": self.changed_by.file, "line": self.changed_by.line},
                "operation": self.changed_by.operation,
                "function": self.changed_by.function,
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
        if self.file is None:
            return "?"
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run + 1,
            "operation": self.operation,
            "call_site": {"file": self.file, "line": self.line},
            "function": self.function,
            "count": self.count,
        }


@dataclass(frozen=True)
class Analysis:
    """Everything compared: aligned steps, the causes in order, random fallbacks, unaligned events."""

    steps: tuple[Step, ...]
    causes: tuple[Cause, ...]
    #: Events of some run that have no counterpart in another run.
    unaligned: int = 0
    #: Of those, calls `datasets` made itself (`select`, `set_format` inside a step it computed):
    #: a cold run makes them where a warm one loads the result, on the same path.
    unaligned_internal: int = 0
    #: Random fallbacks on steps whose fingerprints all matched anyway.
    hidden_random: tuple[Cause, ...] = field(default_factory=tuple)
    #: Steps inside a cascade whose own arguments differ as well (hidden by an earlier cause).
    masked: tuple[Cause, ...] = field(default_factory=tuple)
    #: Calls the user made that some runs recorded and others did not.
    one_run_only: tuple[Unmatched, ...] = field(default_factory=tuple)
    #: Steps that hash an object an earlier step changed while it ran, where every run computed
    #: that step and all agree: whether a run that loads it agrees was not observed (a note).
    unobserved: tuple[Cause, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        # A cause is observed: at a step the user made whose fingerprint differs between runs.
        for cause in self.causes:
            if cause.step.internal or not cause.step.differs:
                raise ValueError(f"a cause must be a differing step the user made: step {cause.step.index}")

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
