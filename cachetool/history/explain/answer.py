"""The answer of `cachetool explain`, as typed values: steps, the reasons they were computed,
stale cache hits, and the steps of a run that ran without a persistent cache.

Every message is rendered from these values (`Reason.text`, `StaleHit.message`); nothing reads a
message back to decide anything: `Reason.kind`, `StepExplanation.status` and `ExplainReport.mode`
are the values code looks at.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cachetool.formatting import clock_time
from cachetool.history.records.steps import StepRecord
from cachetool.history.runs import Failure, Interruption
from cachetool.safejson import json_fields, json_value

#: What differs between a step and the sibling it is compared with (each kind: docs/explain.md);
#: `resumed` and `rekeyed` come besides the others. A change upstream names its step (`Reason.upstream`).
ReasonKind = Literal[
    "argument",
    "function",
    "function-source",
    "source-file",
    "nondeterministic",
    "cache-state",
    "non-semantic",
    "random",
    "fingerprint-given",
    "source",
    "input",
    "versions",
    "same-fingerprint",
    "concurrent",
    "failed-before",
    "killed-before",
    "first-run",
    "unexplained",
    "resumed",
    "rekeyed",
]
#: What a step did with its result: computed it (a cache miss), loaded it (a hit), reused some
#: `num_proc` shards and computed the others, or wrote no file.
StepStatus = Literal["computed", "loaded", "partial", "no file"]
#: One fingerprint explained, or every computed step of a run.
ExplainMode = Literal["fingerprint", "run"]


@dataclass(frozen=True)
class LineChange:
    """One changed line of a function: its number in the newer source (or the older one, for a
    removed line) and the text before and after (None: added or removed)."""

    line: int
    before: str | None
    after: str | None

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
            **json_fields(self, "fingerprint", "operation", "function"),
            "call_site": {"file": self.file, "line": self.line},
            **json_fields(self, "time", "run", "host"),
        }


@dataclass(frozen=True)
class Reason:
    """One thing that differs between a step and the sibling it is compared with."""

    kind: ReasonKind
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
    #: That step loaded its (other) result from the cache.
    upstream_loaded: bool = False

    @property
    def text(self) -> str:
        if self.upstream is None:
            return self.message
        made = "loaded another result" if self.upstream_loaded else "was recomputed"
        return f"its input changed: {self.upstream.label} {made} because {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.text,
            **json_fields(self, "argument", "path", "before", "after", "lines", "hint", "upstream"),
        }


@dataclass(frozen=True)
class SourceChange:
    """A function whose code changed between the computation of a result and a later moment."""

    qualname: str
    file: str | None
    lines: tuple[LineChange, ...]
    #: Values of its module it reads that changed (its code the same, or not).
    values: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """As its module names it (`Tokenizer.__call__`, `clean_text`)."""
        if not self.file:
            return self.qualname
        return strip_module(self.qualname, self.file) or self.qualname.rsplit(".", 1)[-1]


def strip_module(qualname: str, path: str) -> str | None:
    """`pkg.text_helpers.clean_text` in `.../text_helpers.py` -> `clean_text`."""
    stem = os.path.splitext(os.path.basename(path))[0]
    marker = f"{stem}."
    idx = qualname.find(marker)
    if stem == "__init__":
        return qualname.rsplit(".", 1)[-1]
    return qualname[idx + len(marker) :] if idx >= 0 else None


@dataclass(frozen=True)
class StaleHit:
    """A cache entry computed by code that has changed since (`datasets` reuses it, or did), or
    made from such an entry (`derived_from`): stale too, though its own code is the same."""

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
    #: The step upstream whose stale result this entry was made from (None: its own code changed).
    derived_from: StepRef | None = None
    #: When `derived_from`'s step was recomputed by changed code after this entry was made (None:
    #: that step's result is itself stale).
    recomputed_at: float | None = None
    #: The fingerprints the hint removes together: this entry and what was made from it.
    remove: tuple[str, ...] = field(default=(), compare=False)
    #: The entry is a source (a `from_generator` dataset): gc removes one only when told.
    source: bool = field(default=False, compare=False)
    #: One of `remove` is a source.
    remove_sources: bool = field(default=False, compare=False)
    #: Reused under a random fallback fingerprint that repeats after `random.seed` (datasets
    #: < 2.17): whatever code computed it, this step would load it.
    predictable: bool = False
    #: The fingerprint the file it loaded (named by `cache_file_name=`) was written under, when not
    #: the step's: `datasets` loads a named file whatever changed.
    written_under: str | None = None
    #: The files its generator was given by name that changed since it was computed, each as
    #: `words.txt: size 4 → 6 bytes`: `datasets` hashes their names, not what they hold (for an
    #: entry made from a stale result, those of the generator upstream that made it stale).
    inputs: tuple[str, ...] = ()

    @property
    def file_name(self) -> str:
        return os.path.basename(self.files[0]) if self.files else f"cache-{self.fingerprint}"

    @property
    def gc_command(self) -> str:
        """The command that removes this entry and every stale entry made from it now (min-age 0:
        they were just found stale)."""
        from cachetool.hints import gc_command

        targets = self.remove or (self.fingerprint,)
        if self.remove_sources or (self.source and not self.remove):
            targets = (*targets, "--include-sources")
        if self.root is None:
            return shlex.join(["cachetool", "gc", *targets, "--min-age", "0"])
        return gc_command(self.root, *targets)

    @property
    def message(self) -> str:
        if self.predictable:
            return (
                f"cache entry {self.file_name} was reused at {clock_time(self.reused_at or 0)}, "
                "probably stale: the fingerprint is predictable, not derived from the function"
            )
        if self.written_under:
            return (
                f"cache entry {self.file_name} was loaded at {clock_time(self.reused_at or 0)} by "
                f"{self.step.label} (its cache_file_name=), but was written under fingerprint "
                f"{self.written_under}, not the step's {self.fingerprint}: probably stale"
            )
        up = self.derived_from
        if up is not None:
            what = f"cache entry {self.file_name} ({self.step.label})"
            if self.recomputed_at is not None:
                return (
                    f"{what} was made from an older result of {up.label}, recomputed at "
                    f"{clock_time(self.recomputed_at)} by changed code"
                )
            return f"{what} was made from the stale result of {up.label}"
        if self.inputs and not self.changes:
            what = f"a file its generator reads changed ({', '.join(self.inputs)})"
            if self.reused_at is not None:
                return (
                    f"cache entry {self.file_name} was reused at {clock_time(self.reused_at)}, but {what} "
                    "since it was computed"
                )
            return f"cache entry {self.file_name} was computed before {what}; the next run will reuse it"
        names = ", ".join(
            f"`{c.name}` in {os.path.basename(c.file)}" if c.file else f"`{c.name}`" for c in self.changes
        )
        first = next((c.lines[0] for c in self.changes if c.lines), None)
        value = next((v for c in self.changes for v in c.values), None)
        tail = (
            f" ({first})"
            if first is not None
            else f" (the value of `{value}` it reads)"
            if value is not None
            else ""
        )
        if self.reused_at is not None:
            return (
                f"cache entry {self.file_name} was reused at {clock_time(self.reused_at)}, but {names} "
                f"changed since it was computed{tail}"
            )
        return (
            f"cache entry {self.file_name} was computed before {names} changed{tail}; the next run "
            "will reuse it"
        )

    @property
    def hint(self) -> str:
        if self.predictable:
            from cachetool.fingerprint.diff import PREDICTABLE_FALLBACK, PREDICTABLE_HINT

            said = f"datasets could not hash the step and {PREDICTABLE_FALLBACK}"
            return f"{said}: remove it (`{self.gc_command}`); {PREDICTABLE_HINT}"
        if self.written_under:
            return (
                "datasets loads a file named by cache_file_name= whatever changed: remove it and "
                f"what was made from it (`{self.gc_command}`), or pass load_from_cache_file=False, "
                "to compute it again"
            )
        if self.inputs and not self.changes:
            return (
                "datasets hashes the names of the files a generator is given, not what they hold, "
                f"and what was made from a stale result is stale too: remove them all "
                f"(`{self.gc_command}`) to generate it again, or give the generator the file's "
                "modification time too (in gen_kwargs), which changes the fingerprint when the file does"
            )
        return (
            "datasets hashes functions from your own modules by name, not by code, and what was "
            f"made from a stale result is stale too: remove them all (`{self.gc_command}`), or "
            "pass new_fingerprint= (or a version argument) to the step, which changes every "
            "fingerprint after it"
        )

    def elsewhere_hint(self, saved: bool) -> str:
        """The hint for the stale entries of a cache root other than the first one the hints
        name (`saved`: a `save_to_disk` folder): gc takes one `--cache-dir`."""
        what = "a save_to_disk folder and a cache root of its own" if saved else "a cache root of its own"
        tail = "; save_to_disk writes the saved data itself anew when the pipeline runs again"
        return (
            f"stale entries were made from them in {self.root}, {what}: remove those too "
            f"(`{self.gc_command}`){tail if saved else ''}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "fingerprint", "root", "files", "computed_at", "computed_run", "reused_at"),
            **json_fields(
                self, "reused_run", "changes", "step", "derived_from", "recomputed_at", "predictable"
            ),
            **json_fields(self, "written_under", "inputs"),
            "remove": list(self.remove or (self.fingerprint,)),
            **json_fields(self, "message", "hint"),
        }


@dataclass(frozen=True)
class StepExplanation:
    """Why one recorded step computed its result rather than loading it (or that it loaded it)."""

    step: StepRef
    cache: str | None
    duration: float | None
    #: "computed", "loaded", "partial" (some num_proc shards reused) or "no file".
    status: StepStatus
    reasons: tuple[Reason, ...]
    #: The sibling the reasons come from.
    compared_with: StepRef | None
    #: Earlier siblings, most recent first, each with what differs from the one before it.
    history: tuple[tuple[StepRef, tuple[Reason, ...]], ...] = ()
    stale: tuple[StaleHit, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            **self.step.to_json(),
            **json_fields(self, "cache", "duration", "status", "reasons", "compared_with"),
            "history": [
                {"step": ref.to_json(), "reasons": [r.to_json() for r in reasons]}
                for ref, reasons in self.history
            ],
            "stale": json_value(self.stale),
        }


#: What each reason for running without a persistent cache reads as, and how to make the step
#: reusable across runs.
UNCACHED_TEXT: dict[str, str] = {
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
    #: a key of `UNCACHED_TEXT` (kept as read: a newer cachetool may record another)
    reason: str
    duration: float

    @property
    def reason_text(self) -> str:
        return UNCACHED_TEXT.get(self.reason, self.reason)


@dataclass(frozen=True)
class ExplainReport:
    """The answer of `cachetool explain`: one fingerprint, or every computed step of a run."""

    root: Path
    mode: ExplainMode
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
    #: The run ended by an uncaught exception: which, in which step (mode "run").
    failed: Failure | None = None

    @property
    def uncached_seconds(self) -> float:
        return sum(u.duration for u in self.uncached)

    @property
    def computed(self) -> int:
        """How many of the steps computed their result (all or some of its shards)."""
        return sum(s.status in ("computed", "partial") for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "root": str(self.root),
            **json_fields(
                self, "mode", "run", "run_time", "computed", "loaded", "steps", "stale", "uncached"
            ),
            "uncached_seconds": round(self.uncached_seconds, 6),
            "uncached_hint": UNCACHED_HINT if self.uncached else None,
            **json_fields(self, "interrupted", "failed"),
        }
