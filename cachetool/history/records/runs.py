"""Run markers: a traced process started or ended, a step began to compute."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.parts import CallSite


@dataclass(frozen=True, kw_only=True)
class RunStartRecord(LedgerRecord):
    """A traced process started (written when the tracer is installed, to its cache root's ledger):
    a run with this record and no `RunEndRecord` ended without closing (killed, or still running)."""

    TYPE: ClassVar[str] = "run-start"

    argv: tuple[str, ...] = ()
    cwd: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunEndRecord(LedgerRecord):
    """A traced process ended without being killed (an uncaught exception included), or stopped
    tracing; written to every root the run wrote to, with how it ended when `cachetool run` ran
    it (None: not known, as in records of older versions)."""

    TYPE: ClassVar[str] = "run-end"
    OMIT: ClassVar[tuple[str, ...]] = ("status", "exception", "message", "step")

    #: The exit status the script ended with (1 for an uncaught exception).
    status: int | None = None
    #: The uncaught exception that ended the run: its type's name and its message.
    exception: str | None = None
    message: str | None = None
    #: The `seq` of the step the exception came out of (None: outside any step).
    step: int | None = None


@dataclass(frozen=True, kw_only=True)
class StepStartRecord(LedgerRecord):
    """A step began to compute: written when it finds no cache file to load (a miss), before it
    writes, so a run killed in the step still says which step it was and where it wrote. The
    step's own record, written when it ends, has the same `run` and `seq`."""

    TYPE: ClassVar[str] = "step-start"

    operation: str | None = None
    parents: tuple[str, ...] = ()
    call_site: CallSite | None = None
    split: str | None = None
    #: The cache files the step is about to write (they do not exist yet).
    paths: tuple[str, ...] = ()
    #: The `tmp*` files already in those folders when the step began (another run's leftovers):
    #: not what this step wrote.
    before: tuple[str, ...] = ()
