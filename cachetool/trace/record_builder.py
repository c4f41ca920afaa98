"""The records of a tracer (`cachetool.history.records`): one per step a traced call made (from its
frame and what `datasets` hashed inside it), step starts, the run's start and end, source texts.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from cachetool.cache.layout import INCOMPLETE_DIR_SUFFIX
from cachetool.history.records.other import RunStartRecord, SourceRecord
from cachetool.history.records.parts import ArgInfo, Compute, DataFile, FileRecord, FunctionInfo, SourceInfo
from cachetool.history.records.steps import (
    RootRecord,
    SaveRecord,
    StepRecord,
    StepStartRecord,
    TransformRecord,
)
from cachetool.history.writer import RECORD_VERSION
from cachetool.trace.arguments import SOURCES, Arguments, column_heads, operation_of
from cachetool.trace.calls import Calls, CallState, Frame, HashEvent, abs_path, cpu_seconds

#: Local data files recorded per builder root (enough to name the one that changed).
MAX_DATA_FILES = 16

_MISSING = object()
#: A builder's config kwargs the source describes already (its files) or names (its folder).
_DESCRIBED_BY_SOURCE = frozenset({"data_files", "data_dir", "name", "version"})
#: The config id of a builder given its fingerprint (`Dataset.from_generator(fingerprint=)`).
_GIVEN_CONFIG_ID = "default-fingerprint="


class RecordBuilder:
    """Builds the records of one tracer."""

    def __init__(
        self, run: str, pid: int, seq: Iterator[int], roots: Roots, arguments: Arguments, local: CallState
    ) -> None:
        #: The fields every record of the process shares (`LedgerRecord.constant_json`).
        self.constants: dict[str, Any] = dict(v=RECORD_VERSION, run=run, host=socket.gethostname(), pid=pid)
        self.seq = seq
        self.roots = roots
        self.arguments = arguments
        self.local = local  # per thread: which output files existed before the call
        self._sources_done: set[tuple[Any, str]] = set()

    def steps(
        self,
        frame: Frame,
        out: Any,
        exc: BaseException | None,
    ) -> list[StepRecord]:
        """The records of the steps one traced call made (none when it raised, but for a
        transform the user called: its record has the error)."""
        kind = frame.kind
        if kind in ("builder", "load_saved", "save"):
            if exc is not None or (out is None and kind != "save"):
                return []
            return getattr(self, kind)(frame, out)
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
        free = list(own)  # each output takes the hash that made its fingerprint, else the next one
        records: list[StepRecord] = []
        parent_files = {abs_path(f["filename"]) for d in frame.parents for f in cache_files(d)}
        for output, ds in results:
            fp = getattr(ds, "_fingerprint", None)
            h = next((x for x in free if x.result == fp), free[0] if free else None)
            if h is not None:
                free.remove(h)
            # A second output of one call (train_test_split's test) gets its own seq.
            seq = next(self.seq) if records else frame.seq
            records.append(self._transform(frame, ds, fp, output, h, parent_files, seq))
        records = _with_compute(frame, records)
        if exc is not None and not frame.internal:
            records.append(self._error(frame, exc, own[0] if own else None))
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
        seq: int,
    ) -> TransformRecord:
        ds_files = cache_files(ds)
        root, in_memory = self.roots.of(ds, ds_files)
        files, cache = self._files(frame, ds_files, parent_files)
        if h is not None:
            computed = cache in ("miss", "partial") or h.random
            summaries = self.arguments.summaries and not frame.internal and computed
            hashed = self.arguments.hashed(h, described=True, after=cache != "hit", summaries=summaries)
        else:
            hashed = self._adopt(frame, fp) or (
                {} if frame.kind == "concat" else self.arguments.unhashed(frame)
            )
        args, num_proc = hashed.get("args", {}), frame.kwargs.get("num_proc")
        if frame.op in ("map", "filter") and type(num_proc) is int and "num_proc" not in args:
            # Not hashed, but it says how the step ran.
            hashed["args"] = {**args, "num_proc": self.arguments.arg_info(None, repr(num_proc), "int")}
        no_cache = None
        if frame.op in ("map", "filter") and not frame.internal:
            no_cache = self._no_cache(frame, cache, in_memory)
        return TransformRecord(
            **self._call(frame, seq),
            **hashed,
            root=root,
            operation=frame.op,
            result=fp if isinstance(fp, str) else None,
            parents=fingerprints(frame.parent_fps),
            output=output,
            files=files,
            cache=cache,
            in_memory=in_memory,
            split=split_of(ds),
            no_cache=no_cache,
            resumed=frame.resumed,
            rekeyed=frame.rekeyed,
            named_files={} if frame.internal else frame.named,
        )

    def _error(self, frame: Frame, exc: BaseException, h: HashEvent | None) -> TransformRecord:
        """The record of a call that raised: what it was given, and the exception."""
        return TransformRecord(
            **self._call(frame),
            **(self.arguments.hashed(h) if h is not None else {}),
            root=self.roots.of(frame.parents[0])[0] if frame.parents else self.roots.default,
            operation=frame.op,
            parents=fingerprints(frame.parent_fps),
            error=f"{type(exc).__name__}: {exc}",
        )

    def hash_step(self, h: HashEvent, *, internal: bool, root: str) -> TransformRecord:
        """The record of a hash made outside any traced call, or not the call's own."""
        return TransformRecord(
            **self.constants,
            **self.arguments.hashed(h),
            seq=h.seq,
            time=round(h.start, 6),
            internal=internal,
            root=root,
            operation=operation_of(h.transform),
            result=h.result,
            parents=(h.parent,) if isinstance(h.parent, str) else (),
            call_site=h.call_site,
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

    def _adopt(self, frame: Frame, fp: Any) -> dict[str, Any] | None:
        """A call that hashed nothing itself but whose one nested call made the same step
        (`with_format` -> `set_format`, `take` -> `select`): described by that call's hash."""
        parents = fingerprints(frame.parent_fps)
        match = [c for c in frame.children if c.result == fp and c.parents == parents and c.transform]
        if len(match) != 1:
            return None
        c = match[0]
        return {
            "transform": c.transform,
            "args": c.args,
            "function": c.function,
            "random_fallback": c.random_fallback,
        }

    def _files(
        self, frame: Frame, ds_files: list[dict[str, Any]], parent_files: set[str]
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
            before = self.local.snapshot.get(path, _MISSING)
            if loads and isinstance(before, tuple) and before[1] >= 0:
                reused += 1
                files.append(FileRecord(path, before[1], "reused"))
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if isinstance(before, tuple):
                new = before[0] != st.st_ino
            elif loads and frame.resumed is None and frame.rekeyed is None:  # those wrote here
                # Absent when the call began: another process may have renamed its file into
                # place before `datasets` looked, which then loaded it. Written here only if
                # `datasets` set out to write it here.
                new = path in self.local.writes
            elif before is _MISSING:
                # Not predicted (a custom file name): judge by the time it was last written.
                new = st.st_mtime >= frame.start - 0.005
            else:
                new = True
            written += new
            reused += not new
            files.append(FileRecord(path, st.st_size, "written" if new else "reused"))
        if not files:
            return (), "none"
        return tuple(files), "miss" if not reused else "hit" if not written else "partial"

    def builder(self, frame: Frame, out: Any) -> list[StepRecord]:
        """The root records of a builder's splits (`load_dataset`, `DatasetBuilder.as_dataset`)."""
        builder: Any = frame.args[0] if frame.args else frame.kwargs.get("self")
        # `cache_dir=` may be a URL (`file:///…`): the path it names, or on another file system the
        # process's cache root (as for every entry point: `local_path`).
        cache_root = local_path(getattr(builder, "_cache_dir_root", None)) or self.roots.default
        self.roots.add(cache_root)
        rel = None
        with contextlib.suppress(Exception):
            rel = builder._relative_data_dir()
        prepared = getattr(builder, "__dict__", {}).get("_cachetool_prepared", "hit")
        data_files = _data_files(builder)
        items = (
            list(out.items())
            if isinstance(out, dict)
            else ([(None, d) for d in out] if isinstance(out, (list, tuple)) else [(None, out)])
        )
        operation = frame.entry if frame.entry and not frame.entry.startswith("_") else "as_dataset"
        status = "reused" if prepared == "hit" else "written"
        # `from_generator`: datasets hashes the generator, and helpers of the user's module it calls
        # by name only: their code is recorded as a mapped function's is (stale results).
        function = None
        args = {}
        gen_files: tuple[DataFile, ...] = ()
        with contextlib.suppress(Exception):
            generator = getattr(getattr(builder, "config", None), "generator", None)
            gen_kwargs = getattr(getattr(builder, "config", None), "gen_kwargs", None)
            # the functions and objects of the user's it is given there are followed as a map's are
            function = self.arguments.function_info(generator, gen_kwargs) if callable(generator) else None
            if callable(generator) and gen_kwargs:  # hashed into the config id, in its order
                args["gen_kwargs"] = self.arguments.value_info(gen_kwargs)
                gen_files = _gen_files(gen_kwargs)
        with contextlib.suppress(Exception):
            args.update(self._config_args(builder, args))
        call = self._call(frame)
        prepared_in = getattr(builder, "__dict__", {}).pop("_cachetool_prepare_time", None)
        if prepared_in is not None and operation == "load_dataset":  # it prepared, then `as_dataset`
            call.update(time=round(prepared_in[0], 6), duration=round(call["duration"] + prepared_in[1], 6))
        # `from_generator(fingerprint=)`: datasets sets the dataset's fingerprint to it once this
        # returns (the builder's folder is named after it): the steps made from it name it.
        config_id = str(getattr(builder, "config_id", None) or "")
        given = config_id.removeprefix(_GIVEN_CONFIG_ID) if config_id.startswith(_GIVEN_CONFIG_ID) else None
        # `cache_dir=` the script gave (a new temporary folder in each run prepares it anew).
        named = {"cache_dir": cache_root} if cache_root != self.roots.default else {}
        records: list[StepRecord] = []
        for output, ds in items:
            fields = _dataset_fields(ds, status, prepared)
            records.append(
                RootRecord(
                    **{**call, "seq": next(self.seq) if records else frame.seq},
                    **(fields if given is None else {**fields, "result": given}),
                    fingerprint_given=given is not None,
                    root=cache_root,
                    operation=operation,
                    output=None if output is None else str(output),
                    function=function,
                    args=args,
                    named_files=named,
                    source=SourceInfo(
                        kind="builder",
                        builder=_str_or_none(getattr(builder, "name", None)),
                        config=_str_or_none(getattr(getattr(builder, "config", None), "name", None)),
                        relative_data_dir=_str_or_none(rel),
                        split=split_of(ds),
                        data_files=data_files,
                        gen_files=gen_files,
                    ),
                )
            )
        return records

    def _config_args(self, builder: Any, recorded: Mapping[str, ArgInfo]) -> dict[str, ArgInfo]:
        """The builder's configuration that `datasets` hashes into its config id (the cache
        folder's name) besides the data files the source describes: `features=`, a csv's
        `column_names=`, a generator and its `gen_kwargs`: for check-determinism, which compares
        their hash trees (the ledger keeps what it kept: `explain` compares a step with records
        written before these were). None when the id was given (`from_generator(fingerprint=)`)."""
        if not self.arguments.trees or str(getattr(builder, "config_id", "")).startswith(_GIVEN_CONFIG_ID):
            return {}
        given = getattr(builder, "config_kwargs", None) or {}
        return {
            key: self.arguments.value_info(value)
            for key, value in sorted(given.items())
            if key not in _DESCRIBED_BY_SOURCE and key not in recorded and value is not None
        }

    def load_saved(self, frame: Frame, out: Any) -> list[StepRecord]:
        """`load_from_disk`: its parent is the saved state."""
        local, path, root = self._saved(frame.args[0] if frame.args else frame.kwargs.get("dataset_path"))
        state_fp = None
        if local is not None:
            with (
                contextlib.suppress(Exception),
                open(os.path.join(local, "state.json"), encoding="utf-8") as f,
            ):
                state_fp = json.load(f).get("_fingerprint")
        state_fp = state_fp if isinstance(state_fp, str) else None
        record = RootRecord(
            **self._call(frame),
            **_dataset_fields(out, "reused", "hit"),
            root=root,
            operation="load_from_disk",
            parents=(state_fp,) if state_fp else (),
            source=SourceInfo(kind="saved", path=path, state_fingerprint=state_fp),
        )
        return [record]

    def save(self, frame: Frame, out: Any) -> list[StepRecord]:
        """`save_to_disk`: the folder becomes a root of its own."""
        ds = frame.parents[0]
        raw = frame.args[1] if len(frame.args) > 1 else frame.kwargs.get("dataset_path")
        if not isinstance(raw, (str, os.PathLike)):
            return []
        local, path, root = self._saved(raw)
        files = []
        if local is not None:
            with contextlib.suppress(OSError), os.scandir(local) as it:
                for de in it:
                    if de.name.startswith("data-") and de.name.endswith(".arrow"):
                        files.append(FileRecord(de.path, de.stat().st_size, "written"))
        fp = _fingerprint_of(ds)
        record = SaveRecord(
            **self._call(frame),
            root=root,
            operation="save_to_disk",
            result=fp,
            parents=(fp,) if fp else (),
            files=tuple(sorted(files, key=lambda f: f.path)),
            cache="miss" if files else "none",
            split=split_of(ds),
            source=SourceInfo(kind="saved", path=path),
        )
        return [record]

    def _saved(self, raw: Any) -> tuple[str | None, str, str]:
        """(local path, path as recorded, root) of a saved dataset's folder: a root of its own; on
        another file system, the step belongs to the process's cache root."""
        local = local_path(raw)
        if local is None:
            return None, str(os.fspath(raw) if isinstance(raw, os.PathLike) else raw), self.roots.default
        return local, local, self.roots.saved(local)

    def now(self) -> dict[str, Any]:
        """The fields of a record made now, outside a traced call."""
        return {**self.constants, "seq": next(self.seq), "time": round(time.time(), 6)}

    def _call(self, frame: Frame, seq: int | None = None) -> dict[str, Any]:
        """The fields of every record of a traced call's step."""
        return {
            **self.constants,
            "seq": frame.seq if seq is None else seq,
            "time": round(frame.start, 6),
            "duration": round(frame.duration, 6),
            "internal": frame.internal,
            "call_site": frame.call_site,
        }

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
                    **text,
                )
            )
        return out

    def in_memory_root(self, dataset: Any, fp: str, call_site: Any, entry: str | None) -> RootRecord:
        """A dataset made outside any traced call (`Dataset.from_dict`, `from_pandas`, ...)."""
        root, in_memory = self.roots.of(dataset)
        return RootRecord(
            **self.now(),
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

    def save_start(self, top: Frame) -> StepStartRecord | None:
        """The user's `save_to_disk` `top` begins to write its local folder (None: not a local
        one), in the run's own ledger: the folder's ledger records the save when it ends, and a
        folder whose `state.json` is missing or older is an unfinished save (`runs.open_starts`)."""
        raw = top.args[1] if len(top.args) > 1 else top.kwargs.get("dataset_path")
        local = local_path(raw) if isinstance(raw, (str, os.PathLike)) else None
        if local is None:
            return None
        return StepStartRecord(
            **self.constants,
            seq=top.seq,
            time=round(top.start, 6),
            root=self.roots.default,
            operation="save_to_disk",
            call_site=top.call_site,
            paths=(local,),
        )

    def prepare_start(self, builder: Any, caller: Any, calls: Calls) -> StepStartRecord | None:
        """`load_dataset` (or the user's `download_and_prepare`) begins to prepare `builder`'s
        local folder (None: not a local one); its `.incomplete` folder holds what it writes
        (and is the builder's output folder meanwhile)."""
        out = local_path(getattr(builder, "_output_dir", None))
        if out is None:
            return None
        out = out.removesuffix(INCOMPLETE_DIR_SUFFIX)
        _, site, entry = calls.call_site(caller)
        return StepStartRecord(
            **self.constants,
            seq=next(self.seq),
            time=round(time.time(), 6),
            root=local_path(getattr(builder, "_cache_dir_root", None)) or self.roots.default,
            operation="download_and_prepare" if entry == "download_and_prepare" else "load_dataset",
            call_site=site,
            paths=(out,),
        )

    def run_start(self) -> RunStartRecord:
        """The run starts (in the ledger of the process's cache root)."""
        return RunStartRecord(
            **self.now(),
            root=self.roots.default,
            argv=tuple(str(a) for a in sys.argv),
            cwd=_cwd(),
        )


def _with_compute(frame: Frame, records: list[StepRecord]) -> list[StepRecord]:
    """`records` with the call's compute time on those that computed (split evenly between
    them: `train_test_split` computes two); a hit costs one `cpu_seconds()` at its start."""
    if frame.cpu0 is None or not any(r.computed for r in records):
        return records
    n = sum(r.computed for r in records)
    cpu = max(0.0, cpu_seconds() - frame.cpu0)
    part = Compute(wall=round(frame.duration / n, 6), cpu=round(cpu / n, 6))
    return [replace(r, compute=part) if r.computed else r for r in records]


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


def _fingerprint_of(ds: Any) -> str | None:
    fp = getattr(ds, "_fingerprint", None)
    return fp if isinstance(fp, str) else None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _dataset_fields(ds: Any, status: str, cache: str) -> dict[str, Any]:
    """A root record's fields from its dataset: the cache files that exist, with their sizes, all
    with `status`, and `cache` when there are any."""
    files = []
    for f in cache_files(ds):
        path = abs_path(f["filename"])
        with contextlib.suppress(OSError):
            files.append(FileRecord(path, os.stat(path).st_size, status))
    split, cache = split_of(ds), cache if files else "none"
    return {
        "result": _fingerprint_of(ds),
        "files": tuple(files),
        "cache": cache,
        "in_memory": not files,
        "split": split,
    }


def _gen_files(gen_kwargs: Any) -> tuple[DataFile, ...]:
    """The local files a generator is given by name in `gen_kwargs` (a path, or a list of them),
    with their size and mtime: `datasets` hashes the names, not what the files hold."""
    out: list[DataFile] = []
    for value in gen_kwargs.values() if isinstance(gen_kwargs, dict) else ():
        for name in value if isinstance(value, (list, tuple)) else [value]:
            path = local_path(name) if isinstance(name, (str, os.PathLike)) else None
            with contextlib.suppress(OSError):
                if path is not None and len(out) < MAX_DATA_FILES and os.path.isfile(path):
                    st = os.stat(path)
                    out.append(DataFile(None, path, st.st_size, st.st_mtime))
    return tuple(out)


def _data_files(builder: Any) -> tuple[DataFile, ...]:
    """The builder's local data files with their size and mtime at load time (for `explain`)."""
    out: list[DataFile] = []
    with contextlib.suppress(Exception):  # an odd data_files object: the fingerprint still says it
        for split, files in builder.config.data_files.items():
            for f in files if isinstance(files, (list, tuple)) else [files]:
                path = local_path(str(f))
                with contextlib.suppress(OSError):  # gone since
                    if path is not None:  # on another file system: the fingerprint says it
                        st = os.stat(path)
                        out.append(DataFile(str(split), path, st.st_size, st.st_mtime))
                if len(out) >= MAX_DATA_FILES:
                    return tuple(out)
    return tuple(out)


# Which cache root's ledger a record belongs to. A step belongs to the root its result's files live in
# (the process's cache root, a `cache_dir=`, a `save_to_disk` folder: a saved `DatasetDict`'s splits
# belong to its folder). In memory, or on another file system (`s3://…`): the process's cache root.


class Roots:
    """The roots a tracer has met, and the root of each cache folder (remembered per folder).

    `on_new_root(root)` is called once per root met (the tracer holds a lease on it)."""

    def __init__(self, on_new_root: Callable[[str], None]) -> None:
        self.default = ""  # the process's cache root (`HF_DATASETS_CACHE`)
        self._known: set[str] = set()  # cache roots and saved folders met
        self._by_folder: dict[str, str] = {}  # folder -> its root
        self._on_new_root = on_new_root

    def add(self, root: str) -> None:
        if root not in self._known:
            self._known.add(root)
            self._by_folder.clear()
            self._on_new_root(root)

    def saved(self, path: str) -> str:
        """A saved dataset is a root of its own; a split of a saved DatasetDict belongs to the dict."""
        parent = os.path.dirname(path)
        root = parent if os.path.isfile(os.path.join(parent, "dataset_dict.json")) else path
        self.add(root)
        return root

    def of(self, ds: Any, files: list[dict[str, Any]] | None = None) -> tuple[str, bool]:
        """(the root whose ledger holds records about `ds`, whether `ds` lives only in memory)."""
        if files is None:
            files = cache_files(ds)
        if not files:
            return self.default, True
        return self.of_folder(os.path.dirname(abs_path(files[0]["filename"]))), False

    def of_folder(self, folder: str) -> str:
        """The root whose ledger holds records about the cache files in `folder`."""
        hit = self._by_folder.get(folder)
        if hit is not None:
            return hit
        if os.path.basename(folder).startswith("hf_datasets-"):
            # disable_caching(): datasets' temp folder, deleted at exit; the step is the cache's.
            self._by_folder[folder] = self.default
            return self.default
        best = ""
        for r in (*self._known, self.default):
            if (folder == r or folder.startswith(r.rstrip(os.sep) + os.sep)) and len(r) > len(best):
                best = r
        if not best:
            # A folder of Arrow files of its own (Dataset.from_file, a custom cache_file_name).
            best = self.saved(folder) if os.path.isfile(os.path.join(folder, "state.json")) else folder
        self._by_folder[folder] = best
        return best


def local_path(url: Any) -> str | None:
    """The absolute local path an fsspec-style location names (`/a/b`, `a/b`, `file:///a/b`,
    `file:/a/b`, `local:///a/b`, a path-like); None for any other file system (`s3://…`,
    `memory://…`, a chained `simplecache::file://…`)."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        return None
    for scheme in ("file://", "local://"):
        if url.startswith(scheme):
            return abs_path(url[len(scheme) :] or os.sep)
    if url.startswith("file:") and url[5:6] == "/":
        return abs_path(url[5:])
    if "::" in url or "://" in url:
        return None
    return abs_path(url)


def cache_files(ds: Any) -> list[dict[str, Any]]:
    try:
        files = ds.cache_files
    except Exception:  # not a Dataset, or a broken one
        return []
    return files if isinstance(files, list) else []


def split_of(ds: Any) -> str | None:
    split = getattr(ds, "_split", None)
    return str(split) if split is not None else None
