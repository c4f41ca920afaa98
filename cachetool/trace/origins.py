"""The records of the steps where a chain starts or ends: a builder's splits (`load_dataset`,
`DatasetBuilder.as_dataset`), a saved dataset loaded (`load_from_disk`; its parent is the saved
state) and a dataset saved (`save_to_disk`; the folder becomes a root of its own)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cachetool.history.records.parts import DataFile, FileRecord, SourceInfo
from cachetool.history.records.steps import RootRecord, SaveRecord, StepRecord
from cachetool.trace.calls import Frame
from cachetool.trace.roots import abs_path, cache_files, local_path, split_of

if TYPE_CHECKING:
    from cachetool.trace.records import RecordBuilder

__all__ = ["MAX_DATA_FILES", "builder_records", "load_saved_records", "save_records"]

#: Local data files recorded per builder root (enough to name the one that changed).
MAX_DATA_FILES = 16


def builder_records(
    b: RecordBuilder, frame: Frame, out: Any, exc: BaseException | None, duration: float
) -> list[StepRecord]:
    if exc is not None or out is None:
        return []
    builder: Any = frame.args[0] if frame.args else frame.kwargs.get("self")
    # `cache_dir=` may be a URL (`file:///…`): the path it names, or on another file system the
    # process's cache root (as for every entry point: `local_path`).
    cache_root = local_path(getattr(builder, "_cache_dir_root", None)) or b.roots.default
    b.roots.add(cache_root)
    rel = None
    with contextlib.suppress(Exception):
        rel = builder._relative_data_dir()
    with contextlib.suppress(Exception):
        b.roots.remember(builder._output_dir, cache_root)
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
    with contextlib.suppress(Exception):
        generator = getattr(getattr(builder, "config", None), "generator", None)
        function = b.arguments.function_info(generator) if callable(generator) else None
        gen_kwargs = getattr(getattr(builder, "config", None), "gen_kwargs", None)
        if callable(generator) and gen_kwargs:  # hashed into the config id, in its order
            args["gen_kwargs"] = b.arguments.value_info(gen_kwargs)
    records: list[StepRecord] = []
    for output, ds in items:
        files = _stat_files(ds, status)
        records.append(
            RootRecord(
                **b.constants,
                seq=next(b.seq) if records else frame.seq,
                time=round(frame.start, 6),
                duration=round(duration, 6),
                internal=frame.internal,
                root=cache_root,
                operation=operation,
                result=_fingerprint_of(ds),
                output=None if output is None else str(output),
                call_site=frame.call_site,
                function=function,
                args=args,
                files=files,
                cache=prepared if files else "none",
                in_memory=not files,
                split=split_of(ds),
                source=SourceInfo(
                    kind="builder",
                    builder=_str_or_none(getattr(builder, "name", None)),
                    config=_str_or_none(getattr(getattr(builder, "config", None), "name", None)),
                    relative_data_dir=_str_or_none(rel),
                    split=split_of(ds),
                    data_files=data_files,
                ),
            )
        )
    return records


def load_saved_records(
    b: RecordBuilder, frame: Frame, out: Any, exc: BaseException | None, duration: float
) -> list[StepRecord]:
    if exc is not None or out is None:
        return []
    raw = frame.args[0] if frame.args else frame.kwargs.get("dataset_path")
    local = local_path(raw)
    # A saved dataset on another file system: the step belongs to this process's cache root.
    path = local if local is not None else str(os.fspath(raw) if isinstance(raw, os.PathLike) else raw)
    root = b.roots.saved(local) if local is not None else b.roots.default
    state_fp = None
    state_file = os.path.join(local, "state.json") if local is not None else None
    if state_file is not None:
        with contextlib.suppress(Exception), open(state_file, encoding="utf-8") as fh:
            state_fp = json.load(fh).get("_fingerprint")
    state_fp = state_fp if isinstance(state_fp, str) else None
    files = _stat_files(out, "reused")
    record = RootRecord(
        **b.constants,
        seq=frame.seq,
        time=round(frame.start, 6),
        duration=round(duration, 6),
        internal=frame.internal,
        root=root,
        operation="load_from_disk",
        result=_fingerprint_of(out),
        parents=(state_fp,) if state_fp else (),
        call_site=frame.call_site,
        files=files,
        cache="hit" if files else "none",
        in_memory=not files,
        split=split_of(out),
        source=SourceInfo(kind="saved", path=path, state_fingerprint=state_fp),
    )
    return [record]


def save_records(
    b: RecordBuilder, frame: Frame, exc: BaseException | None, duration: float
) -> list[StepRecord]:
    if exc is not None:
        return []
    ds = frame.parents[0]
    raw = frame.args[1] if len(frame.args) > 1 else frame.kwargs.get("dataset_path")
    if not isinstance(raw, (str, os.PathLike)):
        return []
    local = local_path(raw)
    path = local if local is not None else os.fspath(raw)
    root = b.roots.saved(local) if local is not None else b.roots.default
    files = []
    if local is not None:
        with contextlib.suppress(OSError), os.scandir(local) as it:
            for de in it:
                if de.name.startswith("data-") and de.name.endswith(".arrow"):
                    files.append(FileRecord(de.path, de.stat().st_size, "written"))
    fp = _fingerprint_of(ds)
    record = SaveRecord(
        **b.constants,
        seq=frame.seq,
        time=round(frame.start, 6),
        duration=round(duration, 6),
        internal=frame.internal,
        root=root,
        operation="save_to_disk",
        result=fp,
        parents=(fp,) if fp else (),
        call_site=frame.call_site,
        files=tuple(sorted(files, key=lambda f: f.path)),
        cache="miss" if files else "none",
        split=split_of(ds),
        source=SourceInfo(kind="saved", path=path),
    )
    return [record]


def _fingerprint_of(ds: Any) -> str | None:
    fp = getattr(ds, "_fingerprint", None)
    return fp if isinstance(fp, str) else None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _stat_files(ds: Any, status: str) -> tuple[FileRecord, ...]:
    """The cache files of `ds` that exist, with their sizes, all with `status`."""
    files = []
    for f in cache_files(ds):
        path = abs_path(f["filename"])
        with contextlib.suppress(OSError):
            files.append(FileRecord(path, os.stat(path).st_size, status))
    return tuple(files)


def _data_files(builder: Any) -> tuple[DataFile, ...]:
    """The builder's local data files with their size and mtime at load time, so that `explain`
    can say which input file changed when a source dataset gets a new fingerprint."""
    out: list[DataFile] = []
    data_files = getattr(getattr(builder, "config", None), "data_files", None)
    if not isinstance(data_files, Mapping):
        return ()
    try:
        for split, files in data_files.items():
            for f in files if isinstance(files, (list, tuple)) else [files]:
                path = local_path(str(f))
                if path is None:
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                out.append(DataFile(str(split), path, st.st_size, st.st_mtime))
                if len(out) >= MAX_DATA_FILES:
                    return tuple(out)
    except Exception:  # an odd data_files object: the fingerprint still says the source changed
        return tuple(out)
    return tuple(out)
