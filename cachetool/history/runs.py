"""How a traced run ended: closed normally, still running, or killed, and the step it was in.

A SIGKILL writes nothing more: a run with a `RunStartRecord` and no `RunEndRecord`, whose process
is gone, was killed; a `StepStartRecord` without its step record (same `run` and `seq`) is the
step that was running, and datasets' `tmp*` files in its output folder are what it had written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from cachetool.cache.arrow import read_summary
from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.other import RunEndRecord, RunStartRecord
from cachetool.history.records.steps import StepRecord, StepStartRecord
from cachetool.safejson import json_fields

#: "killed": the process is gone; "running": it still runs on this host; "unknown": it ran on
#: another host, so cachetool cannot tell.
RunState = Literal["killed", "running", "unknown"]

#: The operations of a preparation's start (`load_dataset` building its folder): its `paths` is
#: the folder, which it writes as `<folder>.incomplete` and renames when done.
PREPARE_OPERATIONS = frozenset({"load_dataset", "download_and_prepare"})
#: Steps that write a folder of their own rather than cache files (`_unfinished` is not theirs).
_OWN_FOLDER = PREPARE_OPERATIONS | {"save_to_disk"}

#: A file written this long before the step's recorded start still counts as the step's (clocks).
_SLACK = 1.0


@dataclass(frozen=True)
class UnfinishedFile:
    """A file the interrupted step had written: datasets' temporary output, never renamed, or
    (`finished`) a `num_proc` shard its pool workers, orphaned by the kill, finished and renamed
    (datasets reuses finished shards)."""

    path: str
    size: int
    finished: bool = False
    #: A killed map's partial output: the rows a traced rerun reuses (docs/resume.md).
    resumable_rows: int = 0


@dataclass(frozen=True)
class Interruption:
    """A run that ended without closing: its state, the step it was in (None: between steps)."""

    run: str
    state: RunState
    host: str | None
    pid: int | None
    step: StepStartRecord | None
    written: tuple[UnfinishedFile, ...] = ()

    def to_json(self) -> dict[str, Any]:
        names = ("operation", "seq", "time", "parents", "call_site", "split", "paths")
        step = None if self.step is None else json_fields(self.step, *names)
        return json_fields(self) | {"step": step}


#: Exceptions of reading an Arrow file (a cache file cut short or overwritten): `verify` finds it.
_READ_ERRORS = frozenset({"OSError", "ArrowInvalid", "ArrowIOError", "ArrowException"})


@dataclass(frozen=True)
class Failure:
    """A run that ended by an uncaught exception (or a non-zero exit status): how, and in which
    step (None: outside any step)."""

    run: str
    status: int
    exception: str | None
    message: str | None
    step: StepRecord | None

    @property
    def read_error(self) -> bool:
        """The exception is one of reading an Arrow file: a damaged cache file, most likely."""
        return self.exception in _READ_ERRORS and not self.disk_full

    @property
    def disk_full(self) -> bool:
        """The exception is a full file system or quota (ENOSPC, EDQUOT), no damaged file."""
        return self.exception == "OSError" and (self.message or "").startswith(("[Errno 28]", "[Errno 122]"))

    def to_json(self) -> dict[str, Any]:
        s, step = self.step, None
        if s is not None:
            step = json_fields(s, "operation", "seq", "function", "parents", "call_site")
            step["function"] = s.function.qualname if s.function else None
        return {**json_fields(self, skip=("step",)), "step": step}


def failure(records: Iterable[LedgerRecord], run: str) -> Failure | None:
    """How run `run` failed, when its end record says it did (an exception, a non-zero status);
    None for a run that ended well, did not end, or ended before ends said how."""
    end: RunEndRecord | None = None
    steps: dict[int, StepRecord] = {}
    for rec in records:
        if rec.run != run:
            continue
        if isinstance(rec, RunEndRecord):
            end = end or rec
        elif isinstance(rec, StepRecord) and not rec.internal:
            steps[rec.seq] = rec
    if end is None or not (end.status or end.exception):
        return None
    step = steps.get(end.step) if end.step is not None else None
    return Failure(run, end.status or 1, end.exception, end.message, step)


def interruption(records: Iterable[LedgerRecord], run: str) -> Interruption | None:
    """How run `run` ended, when it did not close: None for a run that wrote its end (or one
    recorded before runs had starts and ends)."""
    mine = [rec for rec in records if rec.run == run]
    if any(isinstance(rec, RunEndRecord) for rec in mine):
        return None
    started = next((rec for rec in reversed(mine) if isinstance(rec, RunStartRecord)), None)
    open_steps = open_starts(mine)
    if started is None and not open_steps:
        return None
    first = started or open_steps[0]
    step = max(open_steps, key=lambda s: s.seq) if open_steps else None
    return Interruption(
        run=run,
        state=run_state(first),
        host=first.host,
        pid=first.pid,
        step=step,
        written=_unfinished(step) if step is not None and step.operation not in _OWN_FOLDER else (),
    )


def unended_step(records: Iterable[LedgerRecord], fp: str) -> StepStartRecord | None:
    """The latest step that began to compute `fp`'s cache file and wrote no record of its end:
    its run was killed in it (the `num_proc` workers it left may have finished the file)."""
    name = f"cache-{fp}.arrow"
    open_ = [s for s in open_starts(records) if any(os.path.basename(p) == name for p in s.paths)]
    return open_[-1] if open_ else None


def failed_step(records: Iterable[LedgerRecord], fp: str) -> tuple[StepStartRecord, str] | None:
    """The latest step that began to compute `fp`'s cache file and raised, with the exception its
    record keeps (a `num_proc` map leaves the shards its other workers finished)."""
    name = f"cache-{fp}.arrow"
    starts: dict[tuple[str, int], StepStartRecord] = {}
    errors: dict[tuple[str, int], str] = {}
    for rec in records:
        if isinstance(rec, StepStartRecord) and any(os.path.basename(p) == name for p in rec.paths):
            starts[(rec.run, rec.seq)] = rec
        elif isinstance(rec, StepRecord) and rec.error is not None and rec.result is None:
            errors[(rec.run, rec.seq)] = rec.error
    failed = [(start, errors[key]) for key, start in starts.items() if key in errors]
    return failed[-1] if failed else None


def open_starts(records: Iterable[LedgerRecord]) -> list[StepStartRecord]:
    """The step starts, in the order recorded, whose step wrote no record of its end (the same
    `run` and `seq`): its run was killed in it, or still runs it."""
    starts: list[StepStartRecord] = []
    done: set[tuple[str, int]] = set()
    ended: set[str] = set()
    last: dict[str, int] = {}  # each run's latest step
    for rec in records:
        if isinstance(rec, StepStartRecord):
            starts.append(rec)
        elif isinstance(rec, StepRecord):
            done.add((rec.run, rec.seq))
            last[rec.run] = max(last.get(rec.run, rec.seq), rec.seq)
        elif isinstance(rec, RunEndRecord):
            ended.add(rec.run)
    return [
        s
        for s in starts
        if (s.run, s.seq) not in done and not _saved(s, ended) and not _prepared(s, ended, last)
    ]


def _prepared(start: StepStartRecord, ended: set[str], last: dict[str, int]) -> bool:
    """A preparation start (`load_dataset`) that ended: it has no step record of its own, so its
    run's end or a later step (the builder's records follow it) tells."""
    if start.operation not in PREPARE_OPERATIONS:
        return False
    return start.run in ended or last.get(start.run, -1) > start.seq


def _saved(start: StepStartRecord, ended: set[str]) -> bool:
    """A `save_to_disk` start that ended: its record is in the folder's own ledger, so here its
    run's end or the folder's `state.json` (written last, since the save began) tells."""
    if start.operation != "save_to_disk" or not start.paths:
        return False
    if start.run in ended:
        return True
    try:
        return os.stat(os.path.join(start.paths[0], "state.json")).st_mtime >= start.time - _SLACK
    except OSError:
        return False


def run_state(rec: LedgerRecord) -> RunState:
    import socket

    if rec.host != socket.gethostname() or rec.pid is None:
        return "unknown"
    from cachetool.processes import process_start

    began = process_start(rec.pid)
    # The pid may be another process's now: the run's own one started before its first record.
    return "running" if began is not None and began <= rec.time + _SLACK else "killed"


def _unfinished(step: StepStartRecord) -> tuple[UnfinishedFile, ...]:
    """datasets' temporary files in the step's output folders, written since the step began, and
    the `num_proc` shards of its output finished since (`cache-<fp>_00000_of_00002.arrow`)."""
    out: list[UnfinishedFile] = []
    shards = tuple(os.path.basename(p).removesuffix(".arrow") + "_" for p in step.paths)
    for folder in dict.fromkeys(os.path.dirname(p) for p in step.paths):
        try:
            with os.scandir(folder) as it:
                entries = [e for e in it if e.name.startswith(("tmp", *shards))]
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.name in step.before:  # there before the step began: another run's leftover
                continue
            if e.is_file(follow_symlinks=False) and st.st_mtime >= step.time - _SLACK:
                finished = not e.name.startswith("tmp")
                rows = 0
                if not finished and step.operation == "map":
                    rows = read_summary(e.path, st.st_size).resumable_rows(folder)
                out.append(UnfinishedFile(e.path, st.st_size, finished, rows))
    return tuple(sorted(out, key=lambda f: (f.finished, f.path)))
