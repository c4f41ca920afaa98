"""`verify --deep`: validate every buffer of every Arrow file and checksum every byte (xxh3);
`--record` stores the checksums so a later deep verify reports bytes that changed."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.layout import Kind
from cachetool.cache.scan import CacheFile, CacheReport, Entry
from cachetool.formatting import local_time
from cachetool.maintenance.fdops import identity
from cachetool.maintenance.hints import shell_command
from cachetool.maintenance.verify.checks import Checker
from cachetool.maintenance.verify.model import Finding, Problem, rel

CHECKSUMS_NAME = "checksums.json"


@dataclass(frozen=True)
class DeepResult:
    path: Path
    size: int
    mtime_ns: int
    checksum: str | None
    error: str | None
    identity: tuple[int, int, int, int] | None = None  # of the very file read (its descriptor)


def deep_check(path: Path) -> DeepResult:
    """Validate every buffer of every batch (offsets, UTF-8, nulls) and hash every byte (xxh3)."""
    import mmap

    from cachetool.cache.arrow import open_noatime

    try:
        fd = open_noatime(path)
    except OSError as e:
        return DeepResult(path, 0, 0, None, e.strerror or str(e))
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            return DeepResult(path, 0, st.st_mtime_ns, None, "empty file (0 bytes)")
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        try:
            checksum, error = _hash_and_validate(mm)
        finally:
            try:
                mm.close()
            except BufferError:  # pragma: no cover - a view outlived the walk; GC unmaps it
                pass
        return DeepResult(path, st.st_size, st.st_mtime_ns, checksum, error, identity(st))
    finally:
        os.close(fd)


def _hash_and_validate(mm: Any) -> tuple[str, str | None]:
    """Every pyarrow view of the map lives in this frame only, so the map can close after."""
    import pyarrow as pa
    import xxhash

    checksum = xxhash.xxh3_64(mm).hexdigest()
    try:
        reader = pa.ipc.open_stream(pa.BufferReader(pa.py_buffer(mm)))
        why = load_error(reader.schema)
        if why is not None:
            return checksum, why
        for index, batch in enumerate(reader):
            try:
                batch.validate(full=True)
            except pa.ArrowInvalid as e:
                return checksum, f"invalid data in batch {index}: {' '.join(str(e).split())}"
    except (pa.ArrowInvalid, OSError) as e:
        return checksum, " ".join(str(e).split())
    except Exception as e:  # whatever pyarrow raises on damage is a finding
        return checksum, f"damaged Arrow file: {type(e).__name__}: {' '.join(str(e).split())}"
    return checksum, None


_LOAD_ERRORS: dict[bytes, str | None] = {}
_LOAD_LOCK = threading.Lock()


def load_error(schema: Any) -> str | None:
    """Why `datasets` would refuse a file with this Arrow schema, or None if it would load it.

    `datasets.Dataset.from_file` reads the `huggingface` schema metadata as JSON and builds
    `Features.from_arrow_schema` (which runs `Features.from_dict` on `info.features`), then checks
    column names and types in `Dataset.__init__`. The same constructor runs here on an empty table
    of the same schema (everything it checks depends on the schema alone), so the answer is the
    one `datasets` gives, for every feature type and version; once per distinct schema. Without
    `datasets` installed, the metadata is only parsed as JSON and its shape checked."""
    key = schema.serialize().to_pybytes()
    with _LOAD_LOCK:
        if key in _LOAD_ERRORS:
            return _LOAD_ERRORS[key]
    why = _load_error(schema)
    with _LOAD_LOCK:
        _LOAD_ERRORS[key] = why
    return why


def _load_error(schema: Any) -> str | None:
    try:
        import datasets
    except ImportError:
        return _metadata_shape_error(schema)
    import pyarrow as pa

    try:
        datasets.Dataset(datasets.table.InMemoryTable(pa.Table.from_batches([], schema)))
    except Exception as e:  # whatever datasets raises is the reason it would not load the file
        return f"datasets cannot load it: {type(e).__name__}: {_first_line(e)}"
    return None


def _metadata_shape_error(schema: Any) -> str | None:
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode())
    except (ValueError, RecursionError) as e:
        return f"datasets cannot load it: the huggingface schema metadata is not JSON ({_first_line(e)})"
    info = doc.get("info") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or (info is not None and not isinstance(info, dict)):
        return "datasets cannot load it: the huggingface schema metadata is not an object with an info object"
    features = info.get("features") if isinstance(info, dict) else None
    if features is not None and not isinstance(features, dict):
        return "datasets cannot load it: info.features in the huggingface schema metadata is not an object"
    return None


def _first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:299] + "…"


# -- stored checksums ----------------------------------------------------------------------------


def checksums_path(root: Path) -> Path:
    return root / layout.LEDGER_DIR / CHECKSUMS_NAME


def load_checksums(root: Path) -> dict[str, dict[str, Any]]:
    try:
        with open(checksums_path(root), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) else None
    return files if isinstance(files, dict) else {}


def save_checksums(root: Path, files: dict[str, dict[str, Any]]) -> None:
    folder = root / layout.LEDGER_DIR
    folder.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".checksums-", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps({"version": 1, "files": files}, separators=(",", ":")))
    os.replace(tmp, checksums_path(root))


# -- the deep pass -------------------------------------------------------------------------------


def deep_pass(
    checker: Checker,
    report: CacheReport,
    entries: Sequence[Entry],
    *,
    record: bool,
    jobs: int | None,
    progress: Callable[[int, int], None] | None,
) -> tuple[int, int]:
    """Read every whole Arrow stream of `entries` on `jobs` threads, add a finding for each that
    does not validate or whose bytes changed since recorded, and with `record` store the new
    checksums. Returns (bytes read, checksums stored)."""
    targets: list[tuple[Entry, CacheFile]] = [
        (e, f)
        for e in entries
        if e.kind not in (Kind.TEMP, Kind.INCOMPLETE_PREPARE, Kind.INCOMPLETE_SAVE)
        for f in e.files
        if f.summary is not None and f.summary.error is None and f.summary.format == "stream"
    ]
    results = _read_all(targets, jobs, progress)
    stored = load_checksums(report.root)
    new_sums: dict[str, dict[str, Any]] = dict(stored)
    record_command = shell_command("verify", "--deep", "--record", "--cache-dir", os.fsdecode(report.root))
    for e, res in results:
        if res.error is not None:
            checker.add("invalid-data", e, res.path, res.error, checker.recompute, ident=res.identity)
            continue
        key = rel(res.path, report.root)
        _compare(checker, e, res, stored.get(key), record_command)
        if record:
            new_sums[key] = {
                "size": res.size,
                "mtime_ns": res.mtime_ns,
                "xxh3": res.checksum,
                "time": time.time(),
            }
    total_bytes = sum(res.size for _, res in results)
    if not record:
        return total_bytes, 0
    try:
        save_checksums(report.root, new_sums)
    except OSError as err:
        checker.findings.append(
            Finding(
                Problem("checksums-not-stored", f"cannot store checksums: {err.strerror or err}"),
                "",
                "record",
                checksums_path(report.root),
            )
        )
        return total_bytes, 0
    return total_bytes, sum(1 for _, r in results if r.error is None)


def _compare(
    checker: Checker, e: Entry, res: DeepResult, old: dict[str, Any] | None, record_command: str
) -> None:
    """An error when the bytes differ from the checksum recorded earlier."""
    if old is None or old.get("xxh3") == res.checksum:
        return
    when = local_time(float(old.get("time", 0)), seconds=False)
    same_stat = old.get("size") == res.size and old.get("mtime_ns") == res.mtime_ns
    checker.add(
        "checksum-changed",
        e,
        res.path,
        f"bytes changed since checksum recorded {when}"
        + (" (same size and mtime: bit rot or a silent overwrite)" if same_stat else ""),
        f"if it was rewritten on purpose, run `{record_command}` again",
    )


def _read_all(
    targets: Sequence[tuple[Entry, CacheFile]], jobs: int | None, progress: Callable[[int, int], None] | None
) -> list[tuple[Entry, DeepResult]]:
    results: list[tuple[Entry, DeepResult]] = []
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        for (e, _), res in zip(targets, pool.map(deep_check, [f.path for _, f in targets]), strict=True):
            results.append((e, res))
            if progress is not None:
                progress(len(results), len(targets))
    return results
