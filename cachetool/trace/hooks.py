"""Hooks into `datasets` that record every transform call while a pipeline runs.

Two layers (DESIGN.md, Tracing):

1. The transform methods and entry points (`Dataset.map`, the `fingerprint_transform`-decorated
   methods, `concatenate_datasets`, `DatasetBuilder.as_dataset`, `load_from_disk`, `save_to_disk`)
   are wrapped in *frames*: input fingerprint(s) -> result fingerprint(s), the files written or
   reused, duration, call site. This layer also sees steps given `new_fingerprint=`.
2. `update_fingerprint`, `generate_random_fingerprint` and `generate_fingerprint`, replaced in every
   `datasets` module that imported them by name, give the hash inputs. The per-argument digests
   come from watching `Hasher.hash` inside the original call (no second pickling), and the
   exception `datasets` swallows before falling back to a random fingerprint is caught on its way.

Every hook calls the original and returns its result unchanged; the bookkeeping around it runs
under `try/except Exception` and is switched off in forked children (a `num_proc` pool worker).
A call that `datasets` makes itself while another traced call is running is marked internal.

Known limits: calls made in forked children (datasets' own `num_proc` workers, but also a user's
own fork pool) and in spawned children (fresh interpreters) are not recorded; `IterableDataset`
(streaming) and `DatasetDict` methods are seen through the `Dataset` calls they make.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import json
import os
import platform
import socket
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, TypedDict

from cachetool.lineage.ledger import ENCODER, RECORD_VERSION, LedgerWriter, SegmentWriter
from cachetool.lineage.records import (
    ArgInfo,
    CallSite,
    ColumnHead,
    DataFile,
    FileRecord,
    FunctionInfo,
    LedgerRecord,
    RandomFallback,
    RootRecord,
    RunEndRecord,
    RunStartRecord,
    SaveRecord,
    SourceInfo,
    SourceRecord,
    StepRecord,
    StepStartRecord,
    TransformRecord,
)
from cachetool.trace.sources import describe as describe_function
from cachetool.trace.sources import unwrap
from cachetool.trace.summary import summarize

_MISSING = object()
_WHERE: dict[Any, int] = {}  # code object -> 0 user code, 1 datasets, 2 cachetool
_FN_INFO: dict[Any, FunctionInfo] = {}  # code object -> the "function" field of records
_SOURCES: dict[str, dict[str, Any]] = {}  # source hash -> the text of a user function, for "source" records
_SCALAR_TYPES = frozenset({"bool", "int", "float", "str", "NoneType"})
_CACHE_NAME_KWARGS = (
    "cache_file_name",
    "indices_cache_file_name",
    "train_indices_cache_file_name",
    "test_indices_cache_file_name",
)

#: Public `Dataset` methods traced as transforms (besides every `fingerprint_transform`-decorated one).
TRANSFORM_METHODS = (
    "map",
    "filter",
    "select",
    "sort",
    "shuffle",
    "train_test_split",
    "remove_columns",
    "rename_column",
    "rename_columns",
    "select_columns",
    "flatten",
    "cast",
    "cast_column",
    "add_column",
    "add_item",
    "batch",
    "flatten_indices",
    "shard",
    "skip",
    "take",
    "repeat",
    "with_format",
    "class_encode_column",
    "align_labels_with_mapping",
)
#: Methods that change the dataset in place (the result is `self` afterwards).
INPLACE_METHODS = ("set_format",)


def _warn(message: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"cachetool: warning: {message}\n")
        sys.stderr.flush()


def operation_of(transform: Any) -> str:
    """`datasets.arrow_dataset.Dataset.filter@2.0.1` -> `filter`; `..._map_single` -> `map`."""
    if callable(transform):
        name = getattr(transform, "__name__", "transform")
    else:
        name = str(transform).split("@", 1)[0].rsplit(".", 1)[-1]
    if name == "_map_single":
        return "map"
    if name == "_concatenate_map_style_datasets":
        return "concatenate_datasets"
    return name.lstrip("_") or "transform"


def transform_string(transform: Any) -> str:
    if isinstance(transform, str):
        return transform
    module = getattr(transform, "__module__", None) or ""
    qualname = getattr(transform, "__qualname__", None) or type(transform).__name__
    return f"{module}.{qualname}" if module else qualname


# ------------------------------------------------------------------------------------------
# Small safe descriptions of argument values
# ------------------------------------------------------------------------------------------

_PLAIN = (bool, int, float, type(None))


def safe_repr(value: Any, budget: int = 120) -> str | None:
    """A short repr of small plain values (numbers, short strings, small containers of them);
    None for anything else. Never calls a user-defined `__repr__`."""
    out = _safe_repr(value, budget, 3)
    return out if out is not None and len(out) <= budget else None


def _safe_repr(value: Any, budget: int, depth: int) -> str | None:
    t = type(value)
    if t in _PLAIN:
        return repr(value)
    if t is str:
        return repr(value) if len(value) <= budget else None
    if depth <= 0:
        return None
    if t in (list, tuple, set, frozenset):
        if len(value) > 12:
            return None
        items = sorted(value, key=repr) if t in (set, frozenset) else value
        parts = []
        for v in items:
            r = _safe_repr(v, budget, depth - 1)
            if r is None:
                return None
            parts.append(r)
        body = ", ".join(parts)
        if t is list:
            return f"[{body}]"
        if t is tuple:
            return f"({body}{',' if len(parts) == 1 else ''})"
        return ("{" + body + "}") if parts and t is set else f"{t.__name__}({{{body}}})"
    if t is dict:
        if len(value) > 12:
            return None
        parts = []
        for k, v in value.items():
            rk = _safe_repr(k, budget, depth - 1)
            rv = _safe_repr(v, budget, depth - 1)
            if rk is None or rv is None:
                return None
            parts.append(f"{rk}: {rv}")
        return "{" + ", ".join(parts) + "}"
    return None


_NUMBER_KINDS = {"int": "ints", "float": "floats", "bool": "bools", "str": "strings"}


def describe_value(value: Any, digest: str | None, budget: int = 120) -> str | None:
    """A bounded description of an argument too large or too rich for `safe_repr`: a range as
    written (`range(0, 20000)`), a long sequence as its length, element kind and digest
    (`20000 ints, digest 3f2a…`), `Features` as `name: dtype` pairs; None for anything else.
    Never calls a user-defined `__repr__`."""
    try:
        if type(value) is range:
            return repr(value)
        t = type(value)
        if t.__name__ == "Features" or (t is dict and value and all(_is_feature(v) for v in value.values())):
            body = ", ".join(f"{k}: {_feature_str(v)}" for k, v in value.items())
            return body if len(body) <= budget else body[: budget - 1] + "…"
        if t in (list, tuple) or t.__name__ == "ndarray":
            n = len(value)
            kinds = {type(x).__name__ for x in value[:64]} if t in (list, tuple) else {str(value.dtype)}
            kind = next(iter(kinds)) if len(kinds) == 1 else "value"
            noun = _NUMBER_KINDS.get(kind, kind + " values" if t.__name__ == "ndarray" else f"{kind}s")
            for prefix, word in (("int", "ints"), ("uint", "ints"), ("float", "floats")):
                if kind.startswith(prefix) and t.__name__ == "ndarray":
                    noun = word
            return f"{n} {noun}" + (f", digest {digest}" if digest else "")
    except Exception:  # an odd object: no description rather than a failed record
        return None
    return None


def _is_feature(value: Any) -> bool:
    return type(value).__module__.startswith("datasets.features")


def _feature_str(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, str):
        return dtype
    return type(value).__name__


_TYPE_NAMES: dict[type, str] = {}


def type_name(value: Any) -> str:
    t = type(value)
    name = _TYPE_NAMES.get(t)
    if name is None:
        name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
        _TYPE_NAMES[t] = name
    return name


# ------------------------------------------------------------------------------------------
# State of one traced call
# ------------------------------------------------------------------------------------------


class _Watch:
    """What `Hasher.hash` saw during one `update_fingerprint` call."""

    __slots__ = ("depth", "digests", "error", "error_at", "error_type", "random")

    def __init__(self) -> None:
        self.digests: list[str] = []
        self.depth = 0
        self.error: str | None = None
        self.error_type: str | None = None
        self.error_at: int | None = None
        self.random = False


class _HashEvent:
    __slots__ = (
        "args",
        "call_site",
        "internal",
        "parent",
        "result",
        "seq",
        "start",
        "transform",
        "trees",
        "watch",
    )

    def __init__(self, parent: Any, transform: Any, args: Any, result: Any, watch: _Watch, seq: int) -> None:
        self.parent = parent
        self.transform = transform
        self.args = args
        self.result = result
        self.watch = watch
        self.seq = seq
        self.start = 0.0  # set for hashes outside any traced call; others use their call's start
        self.call_site: CallSite | None = None
        self.internal = False
        #: Hash trees of the arguments, built when datasets hashed them (determinism runs only).
        self.trees: dict[str, Any] | None = None


class _Frame:
    __slots__ = (
        "args",
        "call_site",
        "children",
        "entry",
        "hashes",
        "internal",
        "kind",
        "kwargs",
        "op",
        "original",
        "parent_fps",
        "parents",
        "pending",
        "seq",
        "start",
        "started",
        "t0",
    )
    args: tuple[Any, ...]
    call_site: CallSite | None
    entry: str | None
    internal: bool
    kind: str
    kwargs: dict[str, Any]
    op: str
    original: Any
    parent_fps: list[Any]
    parents: list[Any]
    seq: int
    start: float
    t0: float

    def __init__(self) -> None:
        self.hashes: list[_HashEvent] = []
        self.started = False  # a step-start record was written for this call
        self.children: list[StepRecord] = []
        self.pending: list[LedgerRecord] = []


class _Hashed(NamedTuple):
    """What a step's record says about its hash inputs."""

    transform: str | None
    args: Mapping[str, ArgInfo]
    function: FunctionInfo | None
    random_fallback: RandomFallback | None
    fingerprint_given: bool = False


class _Constants(TypedDict):
    """The fields every record of one process shares (`LedgerRecord.constant_json`)."""

    v: int
    run: str
    host: str
    pid: int
    versions: Mapping[str, str | None]


class _Local(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Frame] = []
        self.watch: _Watch | None = None
        #: Output path -> (inode, size) before the call wrote (size -1: not known), None: absent.
        self.snapshot: dict[str, tuple[int, int] | None] = {}


# ------------------------------------------------------------------------------------------
# Where records go
# ------------------------------------------------------------------------------------------


class LedgerSink:
    """Records go to the ledger of the root each belongs to."""

    def __init__(self) -> None:
        self.writer = LedgerWriter(warn=_warn)
        self.cache_root = ""  # the process's cache root: also where steps on other file systems go
        self.roots: dict[str, None] = {}  # every root written to, in order

    @property
    def run_id(self) -> str:
        return self.writer.run_id

    def emit_line(self, record: LedgerRecord, line: str) -> None:
        """Write one record, already encoded as `line` (JSON, no newline)."""
        root = record.root or self.cache_root
        source = record.source if isinstance(record, StepRecord) else None
        saved = source is not None and source.kind == "saved" and root != self.cache_root
        self.roots[root] = None
        self.writer.append_line(root, line, "saved" if saved else "cache")

    def close(self) -> None:
        self.writer.close()


class EventsSink:
    """The determinism runner's mode: every event, in one file, instead of the ledger."""

    def __init__(self, path: str, trees: bool) -> None:
        from pathlib import Path

        self.path = Path(path)
        self.segment = SegmentWriter(self.path)
        self.trees = trees
        self.run_id = f"{socket.gethostname()}-{os.getpid()}"

    def emit_line(self, record: LedgerRecord, line: str) -> None:
        self.segment.append_line(line)

    def close(self) -> None:
        self.segment.close()


# ------------------------------------------------------------------------------------------
# Replacements that pickle as the originals
# ------------------------------------------------------------------------------------------


class PickledAsOriginal:
    """A replacement for a `datasets` function that pickles exactly as the original it wraps.

    dill, and every pickler built on it (`datasets`' hashing pickler, `multiprocess`), writes the
    same bytes for it as for the original: by reference where dill finds the original under its
    qualified name (the replacement now stands there), else the original itself (by value, as
    for `Hasher.hash`'s function). dill's search for the globals a pickled function refers to
    (`dill.detect.globalvars`) sees the original's code, globals and closure. So the fingerprint of
    anything that references a replaced function does not change under tracing, and unpickling
    gives the original back. Calls go to the replacement; as a class attribute it binds like a
    function.
    """

    __wrapped__: Callable[..., Any]

    def __init__(self, original: Callable[..., Any], replacement: Callable[..., Any]) -> None:
        functools.update_wrapper(self, original)
        self.__wrapped__ = original
        self._replacement = replacement
        _register_with_dill()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._replacement(*args, **kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # `isinstance(x, FunctionType)` answers as for the original
        return type(self.__wrapped__)

    def __getattr__(self, name: str) -> Any:  # __code__, __globals__, __closure__, __defaults__ ...
        return getattr(self.__wrapped__, name)


class _Call:
    """Calls the replacement; not a function, so dill's search for referenced globals stops here."""

    __slots__ = ("replacement",)

    def __init__(self, replacement: Callable[..., Any]) -> None:
        self.replacement = replacement

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.replacement(*args, **kwargs)


_TRAMPOLINES: dict[int, types.CodeType] = {}


def _trampoline_code(cells: int) -> types.CodeType:
    """`def f(*args, **kwargs): return call(*args, **kwargs)` with `cells` more free variables."""
    code = _TRAMPOLINES.get(cells)
    if code is None:
        names = "".join(f", cell{i}" for i in range(cells))
        source = (
            f"def outer(call{names}):\n"
            "    def trampoline(*args, **kwargs):\n"
            f"        if False:\n            (call{names})\n"
            "        return call(*args, **kwargs)\n"
            "    return trampoline\n"
        )
        namespace: dict[str, Any] = {}
        # Compiled as this file: call sites and tracebacks skip its frames like the hooks' own.
        exec(compile(source, __file__, "exec"), namespace)
        code = _TRAMPOLINES[cells] = namespace["outer"].__code__.co_consts[1]
    return code


def function_as_original(original: types.FunctionType, replacement: Callable[..., Any]) -> types.FunctionType:
    """A function that calls `replacement` and that dill pickles as `original`, for an original
    dill finds under its qualified name (a module function, a method). It is a function (`datasets`
    hashes `type(value)` too) and stands under that name, so dill pickles it by reference; for
    dill's search of the globals a pickled function refers to (`dill.detect.globalvars`) it has
    the original's globals, the original's closure cells, and the original's code among its
    constants (the search reads them), so the search finds exactly what it finds from the original.
    """
    cells = original.__closure__ or ()
    template = _trampoline_code(len(cells))
    code = template.replace(co_consts=(*template.co_consts, original.__code__))
    by_name = {f"cell{i}": cell for i, cell in enumerate(cells)}
    by_name["call"] = types.CellType(_Call(replacement))
    closure = tuple(by_name[name] for name in code.co_freevars)
    function = types.FunctionType(code, original.__globals__, original.__name__, None, closure)
    functools.update_wrapper(function, original)
    return function


def _save_as_original(pickler: Any, obj: PickledAsOriginal) -> None:
    original = obj.__wrapped__
    module = sys.modules.get(getattr(original, "__module__", None) or "")
    found: Any = module
    for part in str(getattr(original, "__qualname__", "<")).split("."):
        found = getattr(found, part, None)
    save_function = pickler.dispatch.get(types.FunctionType)
    if found is obj and save_function is not None:
        # Where dill looks the original up by name, it now finds `obj`: saving `obj` as a
        # function writes the very reference the original gets.
        save_function(pickler, obj)
    else:
        pickler.save(original)


def _register_with_dill() -> None:
    """Teach every dill pickler class (each may hold its own copy of dill's dispatch table, as
    `datasets`' does) to save a `PickledAsOriginal` as its original."""
    dill = sys.modules.get("dill")
    base = getattr(dill, "Pickler", None)
    if base is None:
        return
    seen: set[int] = set()
    todo = [base]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        table = vars(cls).get("dispatch")
        if isinstance(table, dict) and id(table) not in seen:
            seen.add(id(table))
            table[PickledAsOriginal] = _save_as_original


# ------------------------------------------------------------------------------------------
# The tracer
# ------------------------------------------------------------------------------------------


class Tracer:
    """Installs the hooks into an imported `datasets` and turns what they see into records."""

    def __init__(self, sink: LedgerSink | EventsSink) -> None:
        self.sink = sink
        self.trees = isinstance(sink, EventsSink) and sink.trees
        # Summaries and source texts are for the ledger; the determinism runner has full trees.
        self._ledger = isinstance(sink, LedgerSink)
        self.enabled = False
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.local = _Local()
        self._seq = _shared_counter()
        self._patches: list[tuple[Any, str, Any]] = []
        self._replacements: dict[int, Any] = {}
        # Per code object, shared by every tracer of the process (tracing() may install twice).
        self._where = _WHERE
        self._fn_info = _FN_INFO
        self._dir_roots: dict[str, tuple[str, str]] = {}
        self._known_roots: dict[str, str] = {}  # root -> kind
        self._registered: set[str] = set()
        self.default_root = ""
        self.versions: dict[str, str] = {}
        self._constants = _Constants(
            v=RECORD_VERSION, run=sink.run_id, host=self.host, pid=self.pid, versions={}
        )
        self._datasets_prefix = ""
        self._cachetool_prefix = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
        self._hook_errors = 0
        self.untraced: list[str] = []  # methods this datasets version lacks
        self._prefix: str | None = None
        self._sources_done: set[tuple[Any, str]] = set()
        self._arg_infos: dict[tuple[str | None, str | None, str], ArgInfo] = {}
        self._ended = False

    # -- installation -----------------------------------------------------------------------
    def install(self) -> bool:
        """Patch the imported `datasets`. Returns False (after one warning) when a hook point is
        missing: the pipeline then runs untraced."""
        import datasets
        import datasets.arrow_dataset as ad
        import datasets.builder as builder_mod
        import datasets.fingerprint as fp_mod

        missing = [
            name
            for name in ("update_fingerprint", "generate_random_fingerprint", "Hasher")
            if not hasattr(fp_mod, name)
        ]
        missing += [
            f"arrow_dataset.{name}"
            for name in ("Dataset", "generate_fingerprint", "_concatenate_map_style_datasets")
            if not hasattr(ad, name)
        ]
        dataset_cls = getattr(ad, "Dataset", None)
        builder_cls = getattr(builder_mod, "DatasetBuilder", None)
        if dataset_cls is not None:
            missing += [
                f"Dataset.{m}"
                for m in (*INPLACE_METHODS, "save_to_disk", "load_from_disk", "_get_cache_file_path")
                if m not in vars(dataset_cls)
            ]
        if builder_cls is None or not all(
            hasattr(builder_cls, m) for m in ("as_dataset", "download_and_prepare", "_relative_data_dir")
        ):
            missing.append("DatasetBuilder.as_dataset/download_and_prepare")
        hasher = getattr(fp_mod, "Hasher", None)
        if hasher is not None and not isinstance(vars(hasher).get("hash"), classmethod):
            missing.append("Hasher.hash")
        if missing:
            _warn(
                f"tracing is off: this datasets {getattr(datasets, '__version__', '?')} has no "
                f"{', '.join(missing[:5])}; the script runs untraced"
            )
            return False
        assert dataset_cls is not None and builder_cls is not None and hasher is not None
        # Transform methods this version lacks (2.21 has no `repeat`; 2.14 no `skip`, `take`,
        # `batch`): the rest is traced, and the user hears once what is not.
        self.untraced = [f"Dataset.{m}" for m in TRANSFORM_METHODS if m not in vars(dataset_cls)]
        if self.untraced:
            _warn(
                f"this datasets {getattr(datasets, '__version__', '?')} has no "
                f"{', '.join(self.untraced)}: calls of those are not traced; everything else is"
            )
        self._datasets_prefix = os.path.dirname(os.path.abspath(datasets.__file__)) + os.sep
        self.default_root = _abs(str(datasets.config.HF_DATASETS_CACHE))
        if isinstance(self.sink, LedgerSink):
            self.sink.cache_root = self.default_root
        self.versions = _versions()
        self._constants["versions"] = self.versions
        try:
            self._patch_all(fp_mod, ad, dataset_cls, builder_cls, hasher)
        except Exception as e:
            self.uninstall()
            _warn(f"tracing is off: installing the hooks failed ({type(e).__name__}: {e})")
            return False
        self.enabled = True
        return True

    def _patch(self, obj: Any, name: str, replacement: Callable[..., Any]) -> None:
        """Put `replacement` in the place of `obj.name` (a function, or the function inside a
        classmethod or staticmethod), pickling as the original does."""
        original = vars(obj)[name] if isinstance(obj, type) else getattr(obj, name)
        self._patches.append((obj, name, original))
        inner = original.__func__ if isinstance(original, (classmethod, staticmethod)) else original
        # One replacement per original: every module that imported a function by name holds the
        # same object, the one dill finds under the function's own name.
        value = self._replacements.get(id(inner))
        if value is None:
            if isinstance(original, classmethod) or not isinstance(inner, types.FunctionType):
                value = PickledAsOriginal(inner, replacement)  # dill pickles the original by value
            else:
                value = function_as_original(inner, replacement)
            self._replacements[id(inner)] = value
        if isinstance(original, (classmethod, staticmethod)):
            value = type(original)(value)
        setattr(obj, name, value)

    def _patch_all(self, fp_mod: Any, ad: Any, dataset_cls: type, builder_cls: type, hasher: type) -> None:
        # Layer 2: the hash inputs, in every datasets module that imported the functions by name.
        originals = {
            "update_fingerprint": (fp_mod.update_fingerprint, self._wrap_update_fingerprint),
            "generate_random_fingerprint": (fp_mod.generate_random_fingerprint, self._wrap_random),
            "generate_fingerprint": (ad.generate_fingerprint, self._wrap_generate_fingerprint),
            "_concatenate_map_style_datasets": (ad._concatenate_map_style_datasets, self._wrap_concat),
        }
        wrapped = {name: make(orig) for name, (orig, make) in originals.items()}
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not (mod_name == "datasets" or mod_name.startswith("datasets.")):
                continue
            d = getattr(mod, "__dict__", None)
            if not isinstance(d, dict):
                continue
            for name, (orig, _) in originals.items():
                if d.get(name) is orig:
                    self._patch(mod, name, wrapped[name])
        self._patch(hasher, "hash", self._wrap_hash(vars(hasher)["hash"].__func__))

        # Layer 1: the edges.
        names = {m for m in TRANSFORM_METHODS if m in vars(dataset_cls)}
        for name, value in vars(dataset_cls).items():
            if not name.startswith("_") and _is_fingerprint_transform(value) and name not in INPLACE_METHODS:
                names.add(name)
        for name in sorted(names):
            self._patch(dataset_cls, name, self._wrap_method(vars(dataset_cls)[name], name, "transform"))
        for name in INPLACE_METHODS:
            self._patch(dataset_cls, name, self._wrap_method(vars(dataset_cls)[name], name, "inplace"))
        self._patch(
            dataset_cls,
            "save_to_disk",
            self._wrap_method(vars(dataset_cls)["save_to_disk"], "save_to_disk", "save"),
        )
        load = vars(dataset_cls)["load_from_disk"]
        self._patch(
            dataset_cls, "load_from_disk", self._wrap_method(load.__func__, "load_from_disk", "load_saved")
        )
        self._patch(
            dataset_cls,
            "_get_cache_file_path",
            self._wrap_cache_path(vars(dataset_cls)["_get_cache_file_path"]),
        )
        self._patch(
            builder_cls,
            "as_dataset",
            self._wrap_method(vars(builder_cls)["as_dataset"], "as_dataset", "builder"),
        )
        self._patch(
            builder_cls, "download_and_prepare", self._wrap_prepare(vars(builder_cls)["download_and_prepare"])
        )

    def uninstall(self) -> None:
        """Restore every patched attribute (the originals come back in reverse order)."""
        with contextlib.suppress(Exception):
            self.end_run()
        self.enabled = False
        for obj, name, original in reversed(self._patches):
            with contextlib.suppress(Exception):
                setattr(obj, name, original)
        self._patches.clear()
        self._replacements.clear()
        with contextlib.suppress(Exception):
            self.sink.close()

    def after_fork(self) -> None:
        # A num_proc worker inherits the hooks; its calls are datasets' own business, and its
        # records would land in the parent's segment. Pass everything through.
        self.enabled = False

    def _hook_failed(self, where: str, e: BaseException) -> None:
        self._hook_errors += 1
        if self._hook_errors == 1:
            _warn(
                f"a tracing hook failed in {where} ({type(e).__name__}: {e}); the pipeline is not "
                "affected, but its lineage may be incomplete"
            )
        if os.environ.get("CACHETOOL_DEBUG"):
            import traceback

            traceback.print_exc()

    # -- layer 2 ------------------------------------------------------------------------------
    def _wrap_hash(self, original: Callable[..., str]) -> Callable[..., str]:
        local = self.local

        @functools.wraps(original)
        def hash(cls: Any, value: Any) -> str:
            w = local.watch
            if w is None or w.depth:
                return original(cls, value)
            w.depth = 1
            try:
                digest = original(cls, value)
            except BaseException as e:
                w.error = str(e)
                w.error_type = type(e).__name__
                w.error_at = len(w.digests)
                raise
            finally:
                w.depth = 0
            w.digests.append(digest)
            return digest

        return hash

    def _wrap_update_fingerprint(self, original: Callable[..., str]) -> Callable[..., str]:
        local = self.local

        @functools.wraps(original)
        def update_fingerprint(fingerprint: Any, transform: Any, transform_args: Any) -> str:
            if not self.enabled:
                return original(fingerprint, transform, transform_args)
            watch = _Watch()
            previous = local.watch
            local.watch = watch
            try:
                result = original(fingerprint, transform, transform_args)
            finally:
                local.watch = previous
            try:
                self._on_hash(fingerprint, transform, transform_args, result, watch)
            except Exception as e:
                self._hook_failed("update_fingerprint", e)
            return result

        return update_fingerprint

    def _wrap_random(self, original: Callable[..., str]) -> Callable[..., str]:
        local = self.local

        @functools.wraps(original)
        def generate_random_fingerprint(*args: Any, **kwargs: Any) -> str:
            w = local.watch
            if w is not None:
                w.random = True
            return original(*args, **kwargs)

        return generate_random_fingerprint

    def _wrap_generate_fingerprint(self, original: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(original)
        def generate_fingerprint(dataset: Any) -> str:
            fp = original(dataset)
            if self.enabled and not self.local.stack:
                try:
                    self._on_in_memory_root(dataset, fp)
                except Exception as e:
                    self._hook_failed("generate_fingerprint", e)
            return fp

        return generate_fingerprint

    def _on_hash(self, parent: Any, transform: Any, args: Any, result: str, watch: _Watch) -> None:
        # A copy: train_test_split reuses one dict for its two hashes, changing fingerprint_name.
        ev = _HashEvent(
            parent,
            transform,
            dict(args) if isinstance(args, Mapping) else args,
            result,
            watch,
            next(self._seq),
        )
        if self.trees and isinstance(ev.args, Mapping):
            # Now, before the transform runs: a map may change the objects its function uses
            # (a tokenizer switching truncation on), and the tree must show what datasets hashed.
            ev.trees = {str(key): _tree(value) for key, value in ev.args.items()}
        stack = self.local.stack
        if stack:
            stack[-1].hashes.append(ev)
            return
        # update_fingerprint outside any traced call (a method this tracer does not wrap).
        ev.start = time.time()
        _, call_site, _ = self._call_site(sys._getframe(2))
        ev.call_site = call_site
        self._emit(self._hash_record(ev, internal=False, root=self.default_root))

    # -- layer 1 ------------------------------------------------------------------------------
    def _wrap_method(self, original: Callable[..., Any], op: str, kind: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return original(*args, **kwargs)
            try:
                frame = self._enter(op, kind, original, args, kwargs)
            except Exception as e:
                self._hook_failed(op, e)
                return original(*args, **kwargs)
            try:
                out = original(*args, **kwargs)
            except BaseException as e:
                self._exit(frame, None, e)
                raise
            self._exit(frame, out, None)
            return out

        return wrapper

    def _wrap_concat(self, original: Callable[..., Any]) -> Callable[..., Any]:
        # Keep the name, module and qualname: `datasets` hashes this very function object as the
        # transform of concatenate_datasets, and dill pickles it by reference to that name.
        return self._wrap_method(original, "concatenate_datasets", "concat")

    def _wrap_cache_path(self, original: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(original)
        def _get_cache_file_path(self_ds: Any, fingerprint: str) -> str:
            path = original(self_ds, fingerprint)
            if self.enabled and self.local.stack:
                try:
                    self._snapshot(path)
                    self._note_start(path)
                except Exception as e:
                    self._hook_failed("_get_cache_file_path", e)
            return path

        return _get_cache_file_path

    def _wrap_prepare(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def download_and_prepare(builder: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return original(builder, *args, **kwargs)
            existed = None
            with contextlib.suppress(Exception):
                existed = os.path.isdir(builder._output_dir)
            out = original(builder, *args, **kwargs)
            with contextlib.suppress(Exception):
                builder.__dict__["_cachetool_prepared"] = "hit" if existed else "miss"
            return out

        return download_and_prepare

    def _snapshot(self, path: str) -> None:
        """Remember which outputs of a call exist before it writes: `cache-<fp>.arrow` and its
        num_proc shards `cache-<fp>_00000_of_00002.arrow` (by inode, so a rewrite shows)."""
        snap = self.local.snapshot
        path = _abs(path)
        if path in snap:
            return
        try:
            st = os.stat(path)
            snap[path] = (st.st_ino, st.st_size)
        except OSError:
            snap[path] = None
        stack = self.local.stack
        num_proc = stack[-1].kwargs.get("num_proc") if stack else None
        if snap[path] is not None and not num_proc:
            # Without num_proc, datasets reuses an existing single file over any shard set.
            return
        folder, base = os.path.split(path)
        stem, ext = os.path.splitext(base)
        try:
            with os.scandir(folder) as it:
                for de in it:
                    name = de.name
                    if name != base and name.startswith(stem) and name.endswith(ext):
                        with contextlib.suppress(OSError):
                            snap.setdefault(os.path.join(folder, name), (de.inode(), -1))
        except OSError:
            pass

    def _note_start(self, path: str) -> None:
        """The user's step is about to compute (its output file is not there to load, or it was
        told not to load it): say so now, so that a run killed inside the step still tells which
        step it was and where it wrote. Cache hits write nothing here."""
        stack = self.local.stack
        top = stack[0]
        path = _abs(path)
        if top.started or not self._ledger:
            return
        if (
            self.local.snapshot.get(path) is not None
            and stack[-1].kwargs.get("load_from_cache_file") is not False
        ):
            return
        top.started = True
        self._emit(
            StepStartRecord(
                **self._constants,
                seq=top.seq,
                time=round(top.start, 6),
                root=self._folder_root(os.path.dirname(path)),
                operation=top.op,
                parents=_fingerprints(top.parent_fps),
                call_site=top.call_site,
                split=_split_of(top.parents[0]) if top.parents else None,
                paths=(path,),
            )
        )

    def start_run(self) -> None:
        """Write the run's start to the ledger of the process's cache root (`end_run` closes it)."""
        if self._ledger and self.enabled:
            self._emit(
                RunStartRecord(
                    **self._constants,
                    seq=next(self._seq),
                    time=round(time.time(), 6),
                    root=self.default_root,
                    argv=tuple(str(a) for a in sys.argv),
                    cwd=_cwd(),
                )
            )

    def end_run(self) -> None:
        """Write the run's end to every root it wrote to: the run ended without being killed.
        Once; never in a forked child."""
        sink = self.sink
        if not (self.enabled and isinstance(sink, LedgerSink)) or self._ended or os.getpid() != self.pid:
            return
        self._ended = True
        now = round(time.time(), 6)
        for root in list(sink.roots):
            self._emit(RunEndRecord(**self._constants, seq=next(self._seq), time=now, root=root))

    def _call_site(self, f: Any) -> tuple[bool, CallSite | None, str | None]:
        """(called by datasets?, first frame outside datasets and cachetool, the datasets function
        the user called)."""
        where = self._where
        caller_in_datasets: bool | None = None
        entry: str | None = None
        while f is not None:
            code = f.f_code
            w = where.get(code)
            if w is None:
                fn = code.co_filename
                w = 1 if fn.startswith(self._datasets_prefix) else 0
                if not w and fn.startswith(self._cachetool_prefix):
                    w = 2
                where[code] = w
            if w == 2:
                f = f.f_back
                continue
            if caller_in_datasets is None:
                caller_in_datasets = w == 1
            if w == 0:
                return (
                    bool(caller_in_datasets),
                    CallSite(code.co_filename, f.f_lineno, code.co_name),
                    entry,
                )
            entry = code.co_name
            f = f.f_back
        return bool(caller_in_datasets), None, entry

    def _enter(
        self, op: str, kind: str, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Frame:
        stack = self.local.stack
        frame = _Frame()
        frame.op = op
        frame.kind = kind
        frame.original = original
        frame.args = args
        frame.kwargs = kwargs
        caller_in_datasets, frame.call_site, frame.entry = self._call_site(sys._getframe(2))
        frame.internal = bool(stack) and caller_in_datasets
        frame.seq = next(self._seq)
        if kind == "concat":
            parents = list(args[0] if args else kwargs.get("dsets") or [])
        elif kind in ("transform", "inplace", "save"):
            parents = [args[0]] if args else [kwargs.get("self")]
        else:
            parents = []
        frame.parents = parents
        frame.parent_fps = [getattr(d, "_fingerprint", None) for d in parents]
        for key in _CACHE_NAME_KWARGS:
            value = kwargs.get(key)
            if isinstance(value, str):
                self._snapshot(value)
        frame.start = time.time()
        frame.t0 = time.perf_counter()
        stack.append(frame)
        return frame

    def _exit(self, frame: _Frame, out: Any, exc: BaseException | None) -> None:
        local = self.local
        stack = local.stack
        try:
            duration = time.perf_counter() - frame.t0
            if stack and stack[-1] is frame:
                stack.pop()
            elif frame in stack:
                stack.remove(frame)
            records = self._records(frame, out, exc, duration)
            if stack:
                # Nested calls finish first; hold their records so that the file is in call order.
                stack[-1].children.extend(records)
                stack[0].pending.extend(records)
            else:
                frame.pending.extend(records)
                frame.pending.sort(key=lambda r: r.seq)
                for rec in frame.pending:
                    self._emit(rec)
        except Exception as e:
            self._hook_failed(frame.op, e)
        finally:
            if not stack:
                local.snapshot.clear()

    def _emit(self, record: LedgerRecord) -> None:
        if self._prefix is None:
            # "v", "run", "host", "pid" and "versions" are the same in every record of the process:
            # encoded once (encoding them each time is a third of the cost of a record).
            self._prefix = ENCODER.encode(record.constant_json())[:-1] + ","
        if self._ledger and isinstance(record, StepRecord) and record.function is not None:
            for src in self._source_records(record, record.function):
                self.sink.emit_line(src, self._prefix + ENCODER.encode(src.to_json(constant=False))[1:])
        self.sink.emit_line(record, self._prefix + ENCODER.encode(record.to_json(constant=False))[1:])

    # -- records ------------------------------------------------------------------------------
    def _records(
        self, frame: _Frame, out: Any, exc: BaseException | None, duration: float
    ) -> list[StepRecord]:
        kind = frame.kind
        if kind == "builder":
            return self._builder_records(frame, out, exc, duration)
        if kind == "load_saved":
            return self._load_saved_records(frame, out, exc, duration)
        if kind == "save":
            return self._save_records(frame, exc, duration)
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
        parent_files = {_abs(f["filename"]) for d in frame.parents for f in _cache_files(d)}
        for output, ds in results:
            fp = getattr(ds, "_fingerprint", None)
            h = next((x for x in own if id(x) not in used and x.result == fp), None)
            if h is None:
                h = next((x for x in own if id(x) not in used), None)
            if h is not None:
                used.add(id(h))
            # A second output of one call (train_test_split's test) gets its own seq.
            seq = next(self._seq) if records else frame.seq
            records.append(self._transform_record(frame, ds, fp, output, h, parent_files, duration, seq))
        if exc is not None and not frame.internal:
            records.append(self._error_record(frame, exc, own[0] if own else None, duration))
        # Hashes made directly in this call that are not its own (rare): internal events.
        for h in frame.hashes:
            if h not in own:
                h.call_site = frame.call_site
                h.start = frame.start
                root = (records[0].root or self.default_root) if records else self.default_root
                records.append(self._hash_record(h, internal=True, root=root))
        return records

    def _transform_record(
        self,
        frame: _Frame,
        ds: Any,
        fp: Any,
        output: str | None,
        h: _HashEvent | None,
        parent_files: set[str],
        duration: float,
        seq: int,
    ) -> TransformRecord:
        ds_files = _cache_files(ds)
        root, in_memory = self._root_of(ds, ds_files)
        if h is not None:
            hashed = self._hashed(h)
        else:
            hashed = self._adopt(frame, fp) or (
                _Hashed(None, {}, None, None) if frame.kind == "concat" else self._unhashed(frame)
            )
        args = self._show_args(hashed.args, frame, h)
        files, cache = self._files(frame, ds_files, parent_files)
        no_cache = None
        if frame.op in ("map", "filter") and not frame.internal:
            no_cache = self._no_cache(frame, cache, in_memory)
        if self.trees and h is not None and cache != "hit":
            args = self._note_changes(args, h)
        computed = cache in ("miss", "partial") or hashed.random_fallback is not None
        if h is not None and self._ledger and not frame.internal and computed:
            args = self._summarize(args, h)
        return TransformRecord(
            **self._constants,
            seq=seq,
            time=round(frame.start, 6),
            duration=round(duration, 6),
            internal=frame.internal,
            root=root,
            operation=frame.op,
            transform=hashed.transform,
            result=fp if isinstance(fp, str) else None,
            parents=_fingerprints(frame.parent_fps),
            output=output,
            call_site=frame.call_site,
            function=hashed.function,
            args=args,
            random_fallback=hashed.random_fallback,
            fingerprint_given=hashed.fingerprint_given,
            files=files,
            cache=cache,
            in_memory=in_memory,
            split=_split_of(ds),
            no_cache=no_cache,
        )

    def _error_record(
        self, frame: _Frame, exc: BaseException, h: _HashEvent | None, duration: float
    ) -> TransformRecord:
        """The record of a call that raised: what it was given, and the exception."""
        hashed = self._hashed(h) if h is not None else _Hashed(None, {}, None, None)
        return TransformRecord(
            **self._constants,
            seq=frame.seq,
            time=round(frame.start, 6),
            duration=round(duration, 6),
            internal=frame.internal,
            root=self._root_of(frame.parents[0])[0] if frame.parents else self.default_root,
            operation=frame.op,
            transform=hashed.transform,
            parents=_fingerprints(frame.parent_fps),
            call_site=frame.call_site,
            function=hashed.function,
            args=hashed.args,
            random_fallback=hashed.random_fallback,
            error=f"{type(exc).__name__}: {exc}",
        )

    def _no_cache(self, frame: _Frame, cache: str, in_memory: bool) -> str | None:
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

    def _show_args(
        self, args: Mapping[str, ArgInfo], frame: _Frame, h: _HashEvent | None
    ) -> dict[str, ArgInfo]:
        """Give every hashed argument a readable value for `lineage` (a summary where it is too
        large for a repr: `20000 ints, digest …`, a range, the features of a cast), and record
        `num_proc`, which does not enter the fingerprint but says how the step ran."""
        out = dict(args)
        values = h.args if h is not None and isinstance(h.args, Mapping) else {}
        for name, entry in args.items():
            if entry.repr is None and name in values:
                shown = describe_value(values[name], entry.digest)
                if shown is not None:
                    out[name] = dataclasses.replace(entry, repr=shown)
        num_proc = frame.kwargs.get("num_proc")
        if frame.op in ("map", "filter") and type(num_proc) is int and "num_proc" not in out:
            out["num_proc"] = self._arg_info(None, repr(num_proc), "int")
        return out

    def _adopt(self, frame: _Frame, fp: Any) -> _Hashed | None:
        """A call that hashed nothing itself but whose one nested call made the same step
        (`with_format` -> `set_format`, `take` -> `select`): describe it by that call's hash."""
        parents = _fingerprints(frame.parent_fps)
        match = [c for c in frame.children if c.result == fp and c.parents == parents and c.transform]
        if len(match) != 1:
            return None
        c = match[0]
        return _Hashed(c.transform, c.args, c.function, c.random_fallback)

    def _hashed(self, h: _HashEvent) -> _Hashed:
        """What `datasets` hashed for a step: the transform, each argument (digest, repr, type;
        its hash tree in determinism runs), the user's function, a random fallback."""
        args = h.args if isinstance(h.args, Mapping) else {}
        keys = sorted(args)
        digests = h.watch.digests
        out: dict[str, ArgInfo] = {}
        for i, key in enumerate(keys):
            pos = 3 + 2 * i  # [parent, transform, key0, value0, key1, value1, ...]
            value = args[key]
            tree = None
            if self.trees:
                tree = (h.trees or {}).get(str(key)) if h.trees is not None else _tree(value)
            digest = digests[pos] if pos < len(digests) else None
            if tree is None:
                out[str(key)] = self._arg_info(digest, safe_repr(value), type_name(value))
            else:
                out[str(key)] = ArgInfo(digest, safe_repr(value), type_name(value), tree=tree)
        fn = args.get("function")
        w = h.watch
        fallback = None
        if w.random:
            argument = None
            if w.error_at is not None and w.error_at >= 2:
                index = (w.error_at - 2) // 2
                argument = str(keys[index]) if index < len(keys) else None
            fallback = RandomFallback(argument, w.error, w.error_type)
        return _Hashed(
            transform_string(h.transform),
            out,
            self._function_info(fn) if fn is not None else None,
            fallback,
        )

    def _arg_info(self, digest: str | None, shown: str | None, type_: str) -> ArgInfo:
        """One `ArgInfo` per distinct value: the arguments of a pipeline's steps repeat (the same
        function, the same flags), and a frozen record part can be shared."""
        key = (digest, shown, type_)
        info = self._arg_infos.get(key)
        if info is None:
            if len(self._arg_infos) >= 4096:
                self._arg_infos.clear()
            info = self._arg_infos[key] = ArgInfo(digest, shown, type_)
        return info

    def _note_changes(self, args: dict[str, ArgInfo], h: _HashEvent) -> dict[str, ArgInfo]:
        """Determinism runs: an argument whose digest at the end of a step that ran differs from
        the one datasets computed when it hashed the step was changed by the step itself (a
        tokenizer configured inside the mapped function, a vocabulary built on the first call).
        Its tree after the step goes next to the one taken at hash time, as ``"after"``."""
        values = {str(k): v for k, v in h.args.items()} if isinstance(h.args, Mapping) else {}
        out = dict(args)
        for key, entry in args.items():
            tree = entry.tree
            if entry.digest is None or not isinstance(tree, Mapping) or key not in values:
                continue
            if str(tree.get("t", "")).startswith("datasets."):
                continue  # a dataset argument: its digest follows fingerprints, not the step
            after = _try_hash(values[key])
            if after is not None and after != entry.digest:
                out[key] = dataclasses.replace(entry, after=_tree(values[key]))
        return out

    def _hash_record(self, h: _HashEvent, *, internal: bool, root: str) -> TransformRecord:
        hashed = self._hashed(h)
        return TransformRecord(
            **self._constants,
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

    def _unhashed(self, frame: _Frame) -> _Hashed:
        """A call that hashed nothing (`new_fingerprint=` given): its arguments' reprs, no digests."""
        try:
            bound = inspect.signature(frame.original).bind_partial(*frame.args, **frame.kwargs).arguments
        except (TypeError, ValueError):
            bound = dict(frame.kwargs)
        out: dict[str, ArgInfo] = {}
        for i, (name, value) in enumerate(bound.items()):
            if i == 0 and frame.kind in ("transform", "inplace", "save"):
                continue  # the dataset itself
            items = list(value.items()) if name == "kwargs" and isinstance(value, dict) else [(name, value)]
            for k, v in items:
                out[str(k)] = ArgInfo(None, safe_repr(v) or describe_value(v, None), type_name(v))
        fn = _function_arg(frame)
        return _Hashed(
            None,
            out,
            self._function_info(fn) if fn is not None else None,
            None,
            fingerprint_given=_given_fingerprint(frame.kwargs) is not None,
        )

    def _function_info(self, fn: Any) -> FunctionInfo:
        target, code = unwrap(fn)
        key = code if code is not None else id(target)
        info = self._fn_info.get(key)
        if info is not None:
            return info
        info = FunctionInfo.parse(describe_function(fn, _SOURCES))
        self._fn_info[key] = info
        return info

    def _summarize(self, args: dict[str, ArgInfo], h: _HashEvent) -> dict[str, ArgInfo]:
        """Bounded hash-tree summaries of the arguments of a step that computed its result (or
        fell back to a random fingerprint), for `cachetool explain`. Plain scalars and empty
        containers need none: their repr is the whole story."""
        values = h.args if isinstance(h.args, Mapping) else {}
        out = dict(args)
        for name, entry in args.items():
            r = entry.repr
            if r is not None and (entry.type in _SCALAR_TYPES or r in ("{}", "[]", "()")):
                continue
            if name in ("fingerprint_name", "new_fingerprint"):
                continue
            summary = summarize(values.get(name))
            if summary is not None:
                out[name] = dataclasses.replace(entry, summary=summary)
        return out

    def _source_records(self, record: StepRecord, fn: FunctionInfo) -> list[SourceRecord]:
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
            text = _SOURCES.get(shash) if shash is not None else None
            if text is None or (shash, root) in self._sources_done:
                continue
            self._sources_done.add((shash, root))
            out.append(
                SourceRecord(
                    **self._constants,
                    seq=next(self._seq),
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

    def _files(
        self, frame: _Frame, ds_files: list[dict[str, Any]], parent_files: set[str]
    ) -> tuple[tuple[FileRecord, ...], str]:
        snap = self.local.snapshot
        # A file that existed before a call that may load it from the cache was loaded, not
        # written (datasets writes only where it cannot load): no second stat for a cache hit.
        loads = frame.kwargs.get("load_from_cache_file") is not False and _caching_enabled()
        files = []
        written = reused = 0
        for f in ds_files:
            path = _abs(f["filename"])
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

    def _builder_records(
        self, frame: _Frame, out: Any, exc: BaseException | None, duration: float
    ) -> list[StepRecord]:
        if exc is not None or out is None:
            return []
        builder: Any = frame.args[0] if frame.args else frame.kwargs.get("self")
        cache_root = _abs(str(getattr(builder, "_cache_dir_root", "") or self.default_root))
        self._add_root(cache_root, "cache")
        rel = None
        with contextlib.suppress(Exception):
            rel = builder._relative_data_dir()
        with contextlib.suppress(Exception):
            self._dir_roots[_abs(builder._output_dir)] = (cache_root, "cache")
        prepared = getattr(builder, "__dict__", {}).get("_cachetool_prepared", "hit")
        data_files = _data_files(builder)
        items = (
            list(out.items())
            if isinstance(out, dict)
            else ([(None, d) for d in out] if isinstance(out, (list, tuple)) else [(None, out)])
        )
        operation = frame.entry if frame.entry and not frame.entry.startswith("_") else "as_dataset"
        status = "reused" if prepared == "hit" else "written"
        records: list[StepRecord] = []
        for output, ds in items:
            files = _stat_files(ds, status)
            records.append(
                RootRecord(
                    **self._constants,
                    seq=next(self._seq) if records else frame.seq,
                    time=round(frame.start, 6),
                    duration=round(duration, 6),
                    internal=frame.internal,
                    root=cache_root,
                    operation=operation,
                    result=_fingerprint_of(ds),
                    output=None if output is None else str(output),
                    call_site=frame.call_site,
                    files=files,
                    cache=prepared if files else "none",
                    in_memory=not files,
                    split=_split_of(ds),
                    source=SourceInfo(
                        kind="builder",
                        builder=_str_or_none(getattr(builder, "name", None)),
                        config=_str_or_none(getattr(getattr(builder, "config", None), "name", None)),
                        relative_data_dir=_str_or_none(rel),
                        split=_split_of(ds),
                        data_files=data_files,
                    ),
                )
            )
        return records

    def _load_saved_records(
        self, frame: _Frame, out: Any, exc: BaseException | None, duration: float
    ) -> list[StepRecord]:
        if exc is not None or out is None:
            return []
        raw = frame.args[0] if frame.args else frame.kwargs.get("dataset_path")
        local = local_path(raw)
        # A saved dataset on another file system: the step belongs to this process's cache root.
        path = local if local is not None else str(os.fspath(raw) if isinstance(raw, os.PathLike) else raw)
        root = self._saved_root(local) if local is not None else self.default_root
        state_fp = None
        state_file = os.path.join(local, "state.json") if local is not None else None
        if state_file is not None:
            with contextlib.suppress(Exception), open(state_file, encoding="utf-8") as fh:
                state_fp = json.load(fh).get("_fingerprint")
        state_fp = state_fp if isinstance(state_fp, str) else None
        files = _stat_files(out, "reused")
        record = RootRecord(
            **self._constants,
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
            split=_split_of(out),
            source=SourceInfo(kind="saved", path=path, state_fingerprint=state_fp),
        )
        return [record]

    def _save_records(self, frame: _Frame, exc: BaseException | None, duration: float) -> list[StepRecord]:
        if exc is not None:
            return []
        ds = frame.parents[0]
        raw = frame.args[1] if len(frame.args) > 1 else frame.kwargs.get("dataset_path")
        if not isinstance(raw, (str, os.PathLike)):
            return []
        local = local_path(raw)
        path = local if local is not None else os.fspath(raw)
        root = self._saved_root(local) if local is not None else self.default_root
        files = []
        if local is not None:
            with contextlib.suppress(OSError), os.scandir(local) as it:
                for de in it:
                    if de.name.startswith("data-") and de.name.endswith(".arrow"):
                        files.append(FileRecord(de.path, de.stat().st_size, "written"))
        fp = _fingerprint_of(ds)
        record = SaveRecord(
            **self._constants,
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
            split=_split_of(ds),
            source=SourceInfo(kind="saved", path=path),
        )
        return [record]

    def _on_in_memory_root(self, dataset: Any, fp: str) -> None:
        _, call_site, entry = self._call_site(sys._getframe(3))
        root, in_memory = self._root_of(dataset)
        record = RootRecord(
            **self._constants,
            seq=next(self._seq),
            time=round(time.time(), 6),
            internal=False,
            root=root,
            operation=entry or "Dataset",
            result=fp,
            call_site=call_site,
            in_memory=in_memory,
            split=_split_of(dataset),
            source=SourceInfo(kind="in-memory" if in_memory else "file", constructor=entry),
            columns=_column_heads(dataset) if self.trees and in_memory else {},
        )
        self._emit(record)

    # -- roots --------------------------------------------------------------------------------
    def _add_root(self, root: str, kind: str) -> None:
        if root not in self._known_roots:
            self._known_roots[root] = kind
            self._dir_roots.clear()
            if self.enabled:
                from cachetool.trace.lease import hold_lease

                hold_lease(root)  # this process may write here: gc on other hosts must know

    def _saved_root(self, path: str) -> str:
        """A saved dataset is a root of its own; a split of a saved DatasetDict belongs to the dict."""
        parent = os.path.dirname(path)
        root = parent if os.path.isfile(os.path.join(parent, "dataset_dict.json")) else path
        self._add_root(root, "saved")
        return root

    def _root_of(self, ds: Any, files: list[dict[str, Any]] | None = None) -> tuple[str, bool]:
        """(the root whose ledger holds records about `ds`, whether `ds` lives only in memory)."""
        if files is None:
            files = _cache_files(ds)
        if not files:
            return self.default_root, True
        return self._folder_root(os.path.dirname(_abs(files[0]["filename"]))), False

    def _folder_root(self, folder: str) -> str:
        """The root whose ledger holds records about the cache files in `folder`."""
        hit = self._dir_roots.get(folder)
        if hit is not None:
            return hit[0]
        if os.path.basename(folder).startswith("hf_datasets-"):
            # disable_caching(): datasets' temp folder, deleted at exit; the step is the cache's.
            self._dir_roots[folder] = (self.default_root, "cache")
            return self.default_root
        best = ""
        candidates = dict(self._known_roots)
        candidates.setdefault(self.default_root, "cache")
        for r in candidates:
            if (folder == r or folder.startswith(r.rstrip(os.sep) + os.sep)) and len(r) > len(best):
                best = r
        if not best:
            # A folder of Arrow files of its own (Dataset.from_file, a custom cache_file_name).
            best = self._saved_root(folder) if os.path.isfile(os.path.join(folder, "state.json")) else folder
        self._dir_roots[folder] = (best, candidates.get(best, "cache"))
        return best


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------


def _abs(path: str) -> str:
    if path.startswith("/") and "/." not in path and "//" not in path:
        return path  # already absolute and normal: the common case, kept cheap
    return os.path.abspath(os.path.expanduser(path))


_LOCAL_SCHEMES = ("file://", "local://")


def local_path(url: Any) -> str | None:
    """The absolute local path an fsspec-style location names (`/a/b`, `a/b`, `file:///a/b`,
    `file:/a/b`, `local:///a/b`, a path-like); None for any other file system (`s3://…`,
    `memory://…`, a chained `simplecache::file://…`)."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        return None
    for scheme in _LOCAL_SCHEMES:
        if url.startswith(scheme):
            return _abs(url[len(scheme) :] or os.sep)
    if url.startswith("file:") and url[5:6] == "/":
        return _abs(url[5:])
    if "::" in url or "://" in url:
        return None
    return _abs(url)


def _cache_files(ds: Any) -> list[dict[str, Any]]:
    try:
        files = ds.cache_files
    except Exception:  # not a Dataset, or a broken one
        return []
    return files if isinstance(files, list) else []


def _split_of(ds: Any) -> str | None:
    split = getattr(ds, "_split", None)
    return str(split) if split is not None else None


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working folder was removed
        return None


def _caching_enabled() -> bool:
    """`datasets.is_caching_enabled()` (True when this datasets cannot say)."""
    enabled = getattr(sys.modules.get("datasets.fingerprint"), "is_caching_enabled", None)
    return not callable(enabled) or bool(enabled())


def _fingerprint_of(ds: Any) -> str | None:
    fp = getattr(ds, "_fingerprint", None)
    return fp if isinstance(fp, str) else None


def _fingerprints(values: list[Any]) -> tuple[str, ...]:
    """The parents' fingerprints (a dataset without one has no place in `parents`)."""
    return tuple(fp for fp in values if isinstance(fp, str))


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _stat_files(ds: Any, status: str) -> tuple[FileRecord, ...]:
    """The cache files of `ds` that exist, with their sizes, all with `status`."""
    files = []
    for f in _cache_files(ds):
        path = _abs(f["filename"])
        with contextlib.suppress(OSError):
            files.append(FileRecord(path, os.stat(path).st_size, status))
    return tuple(files)


#: Local data files recorded per builder root (enough to name the one that changed).
MAX_DATA_FILES = 16


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


def _given_fingerprint(kwargs: Mapping[str, Any]) -> str | None:
    for key in ("new_fingerprint", "train_new_fingerprint", "test_new_fingerprint"):
        if isinstance(kwargs.get(key), str):
            return str(kwargs[key])
    return None


def _function_arg(frame: _Frame) -> Any:
    fn = frame.kwargs.get("function")
    if fn is None and frame.op in ("map", "filter") and len(frame.args) > 1:
        fn = frame.args[1]
    return fn if callable(fn) else None


def _is_fingerprint_transform(value: Any) -> bool:
    f = getattr(value, "__func__", value)
    for _ in range(8):
        if f is None:
            return False
        if getattr(f, "_decorator_name_", None) == "fingerprint":
            return True
        f = getattr(f, "__wrapped__", None)
    return False


def _tree(value: Any) -> Any:
    try:
        from cachetool.fingerprint.tree import build_tree
    except Exception:  # the tree module is optional for tracing
        return None
    try:
        return build_tree(value)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


#: Values per column kept for a dataset built in memory (determinism runs), to name the first one
#: that differs between runs.
COLUMN_HEAD = 50


def _column_heads(dataset: Any) -> dict[str, ColumnHead]:
    """Per column of an in-memory dataset: the digest of the column and the short reprs of its first
    values, so that a source built at run time (`from_pandas` of a frame with a timestamp column)
    is explained by the column and the first value that differs."""
    from cachetool.fingerprint.tree import short_repr

    out: dict[str, ColumnHead] = {}
    try:
        table = dataset.data.table
        for name in table.column_names[:64]:
            column = table.column(name)
            out[str(name)] = ColumnHead(
                _try_hash(column), tuple(short_repr(v) for v in column.slice(0, COLUMN_HEAD).to_pylist())
            )
    except Exception:  # an odd table: the fingerprint still says the source differs
        return out
    return out


def _try_hash(value: Any) -> str | None:
    try:
        from cachetool.fingerprint.hashing import try_hash
    except Exception:  # the fingerprint package is optional for tracing
        return None
    return try_hash(value)[0]


def _shared_counter() -> Iterator[int]:
    """One sequence for tracer events and `cachetool.checkpoint()` events, so that `seq` orders both."""
    try:
        from cachetool.determinism import checkpoint

        counter = checkpoint._counter
        if isinstance(counter, itertools.count):
            return counter
    except Exception:  # the determinism package is optional for tracing
        pass
    return itertools.count()


def _versions() -> dict[str, str]:
    from cachetool import __version__

    out = {"python": platform.python_version(), "cachetool": __version__}
    for name in ("datasets", "dill", "pyarrow"):
        mod = sys.modules.get(name)
        out[name] = str(getattr(mod, "__version__", "?")) if mod is not None else "?"
    return out
