"""Whether `datasets` would load an Arrow file, judged from its schema alone, and the verdicts
remembered per cache so a repeated `verify --deep` does not import `datasets` (about 0.6 s of CPU,
more than validating a few GB) to answer what it answered before."""

from __future__ import annotations

import json
import os
import threading
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.store import write_whole

VERDICTS_NAME = "schema-verdicts.json"
#: Far more distinct schemas than any real cache holds; past it the oldest verdicts are dropped.
MAX_VERDICTS = 4096

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
    return _cached(schema.serialize().to_pybytes(), schema)


def _cached(key: bytes, schema: Any) -> str | None:
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
        return f"datasets cannot load it: {type(e).__name__}: {first_line(e)}"
    return None


def _metadata_shape_error(schema: Any) -> str | None:
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode())
    except (ValueError, RecursionError) as e:
        return f"datasets cannot load it: the huggingface schema metadata is not JSON ({first_line(e)})"
    info = doc.get("info") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or (info is not None and not isinstance(info, dict)):
        return "datasets cannot load it: the huggingface schema metadata is not an object with an info object"
    features = info.get("features") if isinstance(info, dict) else None
    if features is not None and not isinstance(features, dict):
        return "datasets cannot load it: info.features in the huggingface schema metadata is not an object"
    return None


def first_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:299] + "…"


def verdicts_path(root: Path) -> Path:
    """In the user's cache folder for this root (`verify --deep` writes nothing into the root)."""
    from cachetool.cache.dirs import derived_dir

    return (derived_dir(root) or root / layout.LEDGER_DIR) / VERDICTS_NAME


class SchemaVerdicts:
    """`load_error` per schema, remembered in the user's cache folder for this root for the
    `datasets` and `pyarrow` installed now (a verdict stored by another install is not used)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.install = _install_key()
        self.known: dict[str, str | None] = {}
        self.new = 0
        self._lock = threading.Lock()
        if self.install is not None:
            self.known = _read_verdicts(verdicts_path(root), self.install)

    def error(self, schema: Any) -> str | None:
        """`load_error(schema)`, from what an earlier verify of this cache found when it can."""
        import xxhash

        raw = schema.serialize().to_pybytes()
        digest = xxhash.xxh3_128_hexdigest(raw)
        with self._lock:
            if digest in self.known:
                return self.known[digest]
        why = _cached(raw, schema)
        with self._lock:
            if digest not in self.known:
                self.known[digest] = why
                self.new += 1
        return why

    def save(self) -> None:
        """Store the verdicts when this run found new ones (where that cannot be written: skipped)."""
        if not self.new or self.install is None:
            return
        path = verdicts_path(self.root)
        stored = _read_verdicts(path, self.install)  # another verify may have added some
        merged = {**stored, **self.known}
        verdicts = dict(list(merged.items())[-MAX_VERDICTS:])
        try:
            doc = {"version": 1, "install": self.install, "verdicts": verdicts}
            write_whole(path, json.dumps(doc).encode(), create_folders=True)
        except OSError:
            return


def _read_verdicts(path: Path, install: str) -> dict[str, str | None]:
    from cachetool.cache.store import read_state_json
    from cachetool.safejson import BadJsonFile

    try:
        doc = read_state_json(path)
    except (OSError, BadJsonFile):
        return {}
    if not isinstance(doc, dict) or doc.get("install") != install:
        return {}
    verdicts = doc.get("verdicts")
    if not isinstance(verdicts, dict):
        return {}
    return {k: v for k, v in verdicts.items() if isinstance(k, str) and (v is None or isinstance(v, str))}


def _install_key() -> str | None:
    """Names the `datasets` and `pyarrow` installed now without importing `datasets`: pyarrow's
    version and the path, size and mtime of the `datasets` modules whose code decides a verdict
    (an upgrade or an edit of them changes it). None without `datasets` (nothing is stored)."""
    import pyarrow as pa

    try:
        spec = find_spec("datasets")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent
    parts = [f"pyarrow {pa.__version__}"]
    for name in ("__init__.py", "arrow_dataset.py", "table.py", "features/features.py"):
        try:
            st = os.stat(package / name)
        except OSError:
            return None
        parts.append(f"{package / name} {st.st_size} {st.st_mtime_ns}")
    return "; ".join(parts)
