"""The records of a tracer: one typed record (`cachetool.history.records`) per step a traced call
made, built from the call's frame and what `datasets` hashed inside it; a step start when a step
begins to compute; the run's start and end; the text of the user's functions.

Every record of a process shares `v`, `run`, `host`, `pid` and `versions` (`Constants`, the
per-process template every record is built from).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any, TypedDict

from cachetool.history.records.other import SourceRecord
from cachetool.history.records.parts import FileRecord, FunctionInfo, SourceInfo
from cachetool.history.records.runs import RunEndRecord, RunStartRecord, StepStartRecord
from cachetool.history.records.steps import RootRecord, StepRecord, TransformRecord
from cachetool.history.writer import RECORD_VERSION
from cachetool.trace import origins
from cachetool.trace.arguments import SOURCES, Arguments, Hashed
from cachetool.trace.calls import Frame, HashEvent
from cachetool.trace.describe import column_heads, operation_of
from cachetool.trace.roots import Roots, abs_path, cache_files, split_of

__all__ = ["Constants", "RecordBuilder", "fingerprints"]

_MISSING = object()


class Constants(TypedDict):
    """The fields every record of one process shares (`LedgerRecord.constant_json`)."""

    v: int
    run: str
    host: str
    pid: int
    versions: Mapping[str, str | None]


class RecordBuilder:
    """Builds the records of one tracer. `ledger`: records go to a ledger (source records,
    step starts and run records are written; an events file has none of them)."""

    def __init__(
        self,
        *,
        run: str,
        host: str,
        pid: int,
        seq: Iterator[int],
        roots: Roots,
        arguments: Arguments,
        ledger: bool,
    ) -> None:
        self.constants = Constants(v=RECORD_VERSION, run=run, host=host, pid=pid, versions={})
        self.seq = seq
        self.roots = roots
        self.arguments = arguments
        self.ledger = ledger
        self._sources_done: set[tuple[Any, str]] = set()

    def steps(
        self,
        frame: Frame,
        out: Any,
        exc: BaseException | None,
        duration: float,
        snapshot: Mapping[str, Any],
    ) -> list[StepRecord]:
        """The records of the steps one traced call made (none when it raised, but for a
        transform the user called: its record has the error)."""
        kind = frame.kind
        if kind == "builder":
            return origins.builder_records(self, frame, out, exc, duration)
        if kind == "load_saved":
            return origins.load_saved_records(self, frame, out, exc, duration)
        if kind == "save":
            return origins.save_records(self, frame, exc, duration)
        results: list[tuple[str | None, Any]]
        if exc is not None:
            results = []
        elif kind == "inplace":
            results = [(None, frame.parents[0])]
        elif isinstance(out, dict):
            results = [(str(k), v) for k, v in out.items()]
        else:
            results = [(None, out)]
        joined = "".join(fp for fp in frame.parent_fps if isinstance(fp, str))
        own = [h for h in frame.hashes if h.parent == joined]
        used: set[int] = set()
        records: list[StepRecord] = []
        parent_files = {abs_path(f["filename"]) for d in frame.parents for f in cache_files(d)}
        for output, ds in results:
            fp = getattr(ds, "_fingerprint", None)
            h = next((x for x in own if id(x) not in used and x.result == fp), None)
            if h is None:
                h = next((x for x in own if id(x) not in used), None)
            if h is not None:
                used.add(id(h))
            # A second output of one call (train_test_split's test) gets its own seq.
            seq = next(self.seq) if records else frame.seq
            records.append(self._transform(frame, ds, fp, output, h, parent_files, duration, seq, snapshot))
        if exc is not None and not frame.internal:
            records.append(self._error(frame, exc, own[0] if own else None, duration))
        # Hashes made directly in this call that are not its own (rare): internal events.
        for h in frame.hashes:
            if h not in own:
                h.call_site = frame.call_site
                h.start = frame.start
                root = (records[0].root or self.roots.default) if records else self.roots.default
                records.append(self.hash_step(h, internal=True, root=root))
        return records

    def _transform(
        self,
        frame: Frame,
        ds: Any,
        fp: Any,
        output: str | None,
        h: HashEvent | None,
        parent_files: set[str],
        duration: float,
        seq: int,
        snapshot: Mapping[str, Any],
    ) -> TransformRecord:
        ds_files = cache_files(ds)
        root, in_memory = self.roots.of(ds, ds_files)
        if h is not None:
            hashed = self.arguments.hashed(h)
        else:
            hashed = self._adopt(frame, fp) or (
                Hashed(None, {}, None, None) if frame.kind == "concat" else self.arguments.unhashed(frame)
            )
        args = self.arguments.show_args(hashed.args, frame, h)
        files, cache = self._files(frame, ds_files, parent_files, snapshot)
        no_cache = None
        if frame.op in ("map", "filter") and not frame.internal:
            no_cache = self._no_cache(frame, cache, in_memory)
        if self.arguments.trees and h is not None and cache != "hit":
            args = self.arguments.note_changes(args, h)
        computed = cache in ("miss", "partial") or hashed.random_fallback is not None
        if h is not None and self.arguments.summaries and not frame.internal and computed:
            args = self.arguments.with_summaries(args, h)
        return TransformRecord(
            **self.constants,
            seq=seq,
            time=round(frame.start, 6),
            duration=round(duration, 6),
            internal=frame.internal,
            root=root,
            operation=frame.op,
            transform=hashed.transform,
            result=fp if isinstance(fp, str) else None,
            parents=fingerprints(frame.parent_fps),
            output=output,
            call_site=frame.call_site,
            function=hashed.function,
            args=args,
            random_fallback=hashed.random_fallback,
            fingerprint_given=hashed.fingerprint_given,
            files=files,
            cache=cache,
            in_memory=in_memory,
            split=split_of(ds),
            no_cache=no_cache,
        )

    def _error(
        self, frame: Frame, exc: BaseException, h: HashEvent | None, duration: float
    ) -> TransformRecord:
        """The record of a call that raised: what it was given, and the exception."""
        hashed = self.arguments.hashed(h) if h is not None else Hashed(None, {}, None, None)
        return TransformRecord(
            **self.constants,
            seq=frame.seq,
            time=round(frame.start, 6),
            duration=round(duration, 6),
            internal=frame.internal,
            root=self.roots.of(frame.parents[0])[0] if frame.parents else self.roots.default,
            operation=frame.op,
            transform=hashed.transform,
            parents=fingerprints(frame.parent_fps),
            call_site=frame.call_site,
            function=hashed.function,
            args=hashed.args,
            random_fallback=hashed.random_fallback,
            error=f"{type(exc).__name__}: {exc}",
        )

    def hash_step(self, h: HashEvent, *, internal: bool, root: str) -> TransformRecord:
        """The record of a hash made outside any traced call, or not the call's own."""
        hashed = self.arguments.hashed(h)
        return TransformRecord(
            **self.constants,
            seq=h.seq,
            time=round(h.start, 6),
            internal=internal,
            root=root,
            operation=operation_of(h.transform),
            transform=hashed.transform,
            result=h.result,
            parents=(h.parent,) if isinstance(h.parent, str) else (),
            call_site=h.call_site,
            function=hashed.function,
            args=hashed.args,
            random_fallback=hashed.random_fallback,
        )

    def _no_cache(self, frame: Frame, cache: str, in_memory: bool) -> str | None:
        """Why a map or filter ran without a persistent cache (it will run again next time)."""
        kwargs = frame.kwargs
        if kwargs.get("keep_in_memory") is True:
            return "keep-in-memory"
        if in_memory:
            return "in-memory"
        if not _caching_enabled():
            return "caching-disabled"
        if kwargs.get("load_from_cache_file") is False and cache in ("miss", "partial"):
            return "load-from-cache-file-false"
        return None

    def _adopt(self, frame: Frame, fp: Any) -> Hashed | None:
        """A call that hashed nothing itself but whose one nested call made the same step
        (`with_format` -> `set_format`, `take` -> `select`): describe it by that call's hash."""
        parents = fingerprints(frame.parent_fps)
        match = [c for c in frame.children if c.result == fp and c.parents == parents and c.transform]
        if len(match) != 1:
            return None
        c = match[0]
        return Hashed(c.transform, c.args, c.function, c.random_fallback)

    def _files(
        self,
        frame: Frame,
        ds_files: list[dict[str, Any]],
        parent_files: set[str],
        snap: Mapping[str, Any],
    ) -> tuple[tuple[FileRecord, ...], str]:
        """The result files a call produced (not its parents'), each written or reused, and the
        call's cache status."""
        # A file that existed before a call that may load it from the cache was loaded, not
        # written (datasets writes only where it cannot load): no second stat for a cache hit.
        loads = frame.kwargs.get("load_from_cache_file") is not False and _caching_enabled()
        files = []
        written = reused = 0
        for f in ds_files:
            path = abs_path(f["filename"])
            if path in parent_files:
                continue
            before = snap.get(path, _MISSING)
            if loads and isinstance(before, tuple) and before[1] >= 0:
                reused += 1
                files.append(FileRecord(path, before[1], "reused"))
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if before is _MISSING:
                # Not predicted (a custom file name): judge by the time it was last written.
                new = st.st_mtime >= frame.start - 0.005
            else:
                new = not isinstance(before, tuple) or before[0] != st.st_ino
            written += new
            reused += not new
            files.append(FileRecord(path, st.st_size, "written" if new else "reused"))
        if not files:
            return (), "none"
        return tuple(files), "miss" if not reused else "hit" if not written else "partial"

    def sources(self, record: StepRecord, fn: FunctionInfo) -> list[SourceRecord]:
        """The `"source"` records a record's function info names that this process has not yet
        written to the record's root."""
        root = record.root or ""
        key = (id(fn), root)
        if key in self._sources_done:
            return []
        self._sources_done.add(key)
        out = []
        for item in (fn, *fn.deps):
            shash = item.source_hash
            text = SOURCES.get(shash) if shash is not None else None
            if text is None or (shash, root) in self._sources_done:
                continue
            self._sources_done.add((shash, root))
            out.append(
                SourceRecord(
                    **self.constants,
                    seq=next(self.seq),
                    time=record.time,
                    internal=True,
                    root=root,
                    hash=shash,
                    qualname=text["qualname"],
                    file=text["file"],
                    line=text["line"],
                    text=text["text"],
                    truncated=text["truncated"],
                )
            )
        return out

    def in_memory_root(self, dataset: Any, fp: str, call_site: Any, entry: str | None) -> RootRecord:
        """A dataset made outside any traced call (`Dataset.from_dict`, `from_pandas`, ...)."""
        root, in_memory = self.roots.of(dataset)
        return RootRecord(
            **self.constants,
            seq=next(self.seq),
            time=round(time.time(), 6),
            internal=False,
            root=root,
            operation=entry or "Dataset",
            result=fp,
            call_site=call_site,
            in_memory=in_memory,
            split=split_of(dataset),
            source=SourceInfo(kind="in-memory" if in_memory else "file", constructor=entry),
            columns=column_heads(dataset) if self.arguments.trees and in_memory else {},
        )

    def step_start(self, top: Frame, path: str) -> StepStartRecord:
        """The user's call `top` begins to compute, writing `path`."""
        return StepStartRecord(
            **self.constants,
            seq=top.seq,
            time=round(top.start, 6),
            root=self.roots.of_folder(os.path.dirname(path)),
            operation=top.op,
            parents=fingerprints(top.parent_fps),
            call_site=top.call_site,
            split=split_of(top.parents[0]) if top.parents else None,
            paths=(path,),
            before=_tmp_names(os.path.dirname(path)),
        )

    def run_start(self) -> RunStartRecord:
        """The run starts (in the ledger of the process's cache root)."""
        return RunStartRecord(
            **self.constants,
            seq=next(self.seq),
            time=round(time.time(), 6),
            root=self.roots.default,
            argv=tuple(str(a) for a in sys.argv),
            cwd=_cwd(),
        )

    def run_end(
        self,
        root: str,
        status: int | None = None,
        exception: str | None = None,
        message: str | None = None,
        step: int | None = None,
    ) -> RunEndRecord:
        """The run ended without being killed (one per root it wrote to), and how, when known."""
        return RunEndRecord(
            **self.constants,
            seq=next(self.seq),
            time=round(time.time(), 6),
            root=root,
            status=status,
            exception=exception,
            message=message,
            step=step,
        )


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working folder was removed
        return None


def _caching_enabled() -> bool:
    """`datasets.is_caching_enabled()` (True when this datasets cannot say)."""
    enabled = getattr(sys.modules.get("datasets.fingerprint"), "is_caching_enabled", None)
    return not callable(enabled) or bool(enabled())


def fingerprints(values: list[Any]) -> tuple[str, ...]:
    """The parents' fingerprints (a dataset without one has no place in `parents`)."""
    return tuple(fp for fp in values if isinstance(fp, str))


def _tmp_names(folder: str) -> tuple[str, ...]:
    """The `tmp*` files of `folder` (datasets' unfinished writes), sorted; () when unreadable."""
    try:
        with os.scandir(folder) as it:
            return tuple(sorted(e.name for e in it if e.name.startswith("tmp")))
    except OSError:
        return ()
