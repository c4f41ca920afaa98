"""The tracer: hooks into `datasets` that record every transform call while a pipeline runs
(DESIGN.md, Tracing). Every hook returns the original's result unchanged; its bookkeeping never
raises into the user's code and is off in forked children.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from cachetool.cache.layout import parse_cache_file
from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.other import RunEndRecord
from cachetool.history.records.steps import StepRecord
from cachetool.history.writer import AUTO_BYTES, ENCODER, LedgerWriter, SegmentWriter, foldable_bytes
from cachetool.trace.arguments import Arguments, hash_tree
from cachetool.trace.calls import (
    FILE_NAME_ARGS,
    Calls,
    Frame,
    HashEvent,
    abs_path,
    named_files,
    wrap_hash,
    wrap_random,
)
from cachetool.trace.leases import hold_lease
from cachetool.trace.patches import Patches
from cachetool.trace.record_builder import RecordBuilder, Roots, local_path

#: Public `Dataset` methods traced as transforms (besides every `fingerprint_transform`-decorated one).
_TRANSFORMS = """map filter select sort shuffle train_test_split remove_columns rename_column rename_columns
select_columns flatten cast cast_column add_column add_item batch flatten_indices shard skip take repeat
with_format class_encode_column align_labels_with_mapping"""
TRANSFORM_METHODS = tuple(_TRANSFORMS.split())


def library_versions() -> dict[str, str]:
    """The versions of Python, cachetool and the imported `datasets`, dill and pyarrow ("?" for
    one not imported): what every record of a traced process says it ran with."""
    from cachetool import __version__

    out = {"python": platform.python_version(), "cachetool": __version__}
    for name in ("datasets", "dill", "pyarrow"):
        mod = sys.modules.get(name)
        out[name] = str(getattr(mod, "__version__", "?")) if mod is not None else "?"
    return out


#: Where the tracer hooks `datasets` (module, then attributes): without one, tracing is off.
_HOOK_POINTS = """fingerprint.update_fingerprint fingerprint.generate_random_fingerprint
fingerprint.Hasher.hash arrow_dataset.generate_fingerprint arrow_dataset._concatenate_map_style_datasets
arrow_dataset.Dataset.set_format arrow_dataset.Dataset.save_to_disk arrow_dataset.Dataset.load_from_disk
arrow_dataset.Dataset._get_cache_file_path builder.DatasetBuilder.as_dataset
builder.DatasetBuilder.download_and_prepare builder.DatasetBuilder._relative_data_dir"""


def _missing_hook_points() -> list[str]:
    """The functions and methods the tracer hooks that this `datasets` lacks."""
    missing = []
    for point in _HOOK_POINTS.split():
        module, *names = point.split(".")
        obj: Any = importlib.import_module(f"datasets.{module}")
        for name in names:
            obj = vars(obj).get(name)
            if obj is None:
                missing.append(point)
                break
    return missing


def _transforms(dataset_cls: type) -> list[str]:
    """The public `Dataset` methods traced as transforms: `TRANSFORM_METHODS` and every
    `fingerprint_transform`-decorated one."""
    names = {m for m in TRANSFORM_METHODS if m in vars(dataset_cls)}
    for name, value in vars(dataset_cls).items():
        if not name.startswith("_") and _is_fingerprint_transform(value) and name != "set_format":
            names.add(name)
    return sorted(names)


def _is_fingerprint_transform(value: Any) -> bool:
    f = getattr(value, "__func__", value)
    for _ in range(8):
        if f is None:
            return False
        if getattr(f, "_decorator_name_", None) == "fingerprint":
            return True
        f = getattr(f, "__wrapped__", None)
    return False


def warn_note(message: str) -> None:
    """A note on stderr (`warn` without "warning: ")."""
    warn(message, kind="")


def warn(message: str, kind: str = "warning: ") -> None:
    """One line on stderr (`kind` "": a note, not a warning), never an exception."""
    with contextlib.suppress(Exception):
        sys.stderr.write(f"cachetool: {kind}{message}\n")
        sys.stderr.flush()


class LedgerSink:
    """Records go to the ledger of the root each belongs to."""

    def __init__(self) -> None:
        self.writer = LedgerWriter(warn=warn)
        self.run_id = self.writer.run_id
        self.cache_root = ""  # the process's cache root: also where steps on other file systems go
        self.roots: dict[str, None] = {}  # every root written to, in order

    def emit_line(self, record: LedgerRecord, line: str, like: LedgerRecord | None = None) -> None:
        """Write one record, already encoded as `line` (JSON, no newline), to the ledger `like`'s
        goes to (default: `record`'s own)."""
        like = like or record
        root = like.root or self.cache_root
        source = like.source if isinstance(like, StepRecord) else None
        saved = source is not None and source.kind == "saved" and root != self.cache_root
        self.roots[root] = None
        self.writer.append_line(root, line, "saved" if saved else "cache")

    def close(self) -> None:
        self.writer.close()


class EventsSink:
    """The determinism runner's mode: every event, in one file, instead of the ledger."""

    def __init__(self, path: str, trees: bool) -> None:
        from pathlib import Path

        self.segment = SegmentWriter(Path(path))
        self.trees = trees
        self.run_id = f"{socket.gethostname()}-{os.getpid()}"

    def emit_line(self, record: LedgerRecord, line: str, like: LedgerRecord | None = None) -> None:
        self.segment.append_line(line)

    def close(self) -> None:
        self.segment.close()


class Tracer:
    """Installs the hooks into an imported `datasets` and turns what they see into records."""

    def __init__(self, sink: LedgerSink | EventsSink, seq: Iterator[int]) -> None:
        """`seq`: the process's event sequence (`install.event_counter`)."""
        self.sink = sink
        self.seq = seq
        self.enabled = False
        self.pid = os.getpid()
        # Summaries and source texts are for the ledger; the determinism runner has full trees.
        self._ledger = isinstance(sink, LedgerSink)
        self.calls = Calls(seq)
        self.local = self.calls.local
        self.roots = Roots(self._on_new_root)
        self.arguments = Arguments(trees=isinstance(sink, EventsSink) and sink.trees, summaries=self._ledger)
        self.records = RecordBuilder(sink.run_id, self.pid, seq, self.roots, self.arguments, self.local)
        self.patches = Patches()
        self._hook_errors = 0
        self._prefix: str | None = None
        self._ended = False
        #: How the run ended, once the runner says (`note_exit`): the fields of its end records.
        self._outcome: dict[str, Any] | None = None
        #: The last exception that came out of a step the user called, with the step's `seq`.
        self._raised: tuple[BaseException, int] | None = None
        #: The determinism runner's cold run: every step computes (`load_from_cache_file=False`)
        #: and writes where a plain run would, so the next run loads what it made.
        self.recompute = False
        #: `cachetool run --reuse-equivalent`: a map about to compute takes an equivalent earlier
        #: result once sampled batches prove it (`cachetool.trace.rekey`).
        self.reuse_equivalent = False
        #: Call sites already warned of a fallback fingerprint that repeats after `random.seed`.
        self._warned: set[Any] = set()
        #: Per root, the results this run loaded (fingerprint to files), and the source files of
        #: the user's modules its steps' functions reach (`StepRecord.may_go_stale`), in any root:
        #: checked for stale results when the run ends, in each root where a source is newer than
        #: a loaded file (a map after `load_from_disk` in a saved folder is stale through a step
        #: of the cache root).
        self._hits: dict[str, dict[str, tuple[str, ...]]] = {}
        self._by_name: set[str] = set()
        #: The run's start (`start_run`), written to each root before the run's first record there.
        self._start: LedgerRecord | None = None
        self._entered: set[str] = set()  # roots the run wrote in: each has the start and a lease
        #: Pull on a miss, push after a compute (`cachetool.remote.transfer`): with a remote configured.
        self.remote: Any = None
        #: `cachetool run --once`: a step another process computes is waited for, then loaded
        #: (`cachetool.trace.once`).
        self.once = False

    # -- installation -----------------------------------------------------------------------
    def install(self) -> bool:
        """Patch the imported `datasets`. Returns False (after one warning) when a hook point is
        missing: the pipeline then runs untraced."""
        import datasets
        import datasets.arrow_dataset as ad

        version = getattr(datasets, "__version__", "?")
        missing = _missing_hook_points()
        if missing:
            lacks = ", ".join(missing[:5])
            warn(f"tracing is off: this datasets {version} has no {lacks}; the script runs untraced")
            return False
        untraced = [f"Dataset.{m}" for m in TRANSFORM_METHODS if m not in vars(ad.Dataset)]
        if untraced:  # 2.21 has no `repeat`; 2.14 no `skip`, `take`, `batch`
            says = "calls of those are not traced; everything else is"
            warn(f"this datasets {version} has no {', '.join(untraced)}: {says}")
        self.calls.datasets_prefix = os.path.dirname(os.path.abspath(datasets.__file__)) + os.sep
        self.roots.default = abs_path(str(datasets.config.HF_DATASETS_CACHE))
        if isinstance(self.sink, LedgerSink):
            self.sink.cache_root = self.roots.default
        self.records.constants["versions"] = library_versions()
        try:
            self._patch_all()
        except Exception as e:
            self.uninstall()
            warn(f"tracing is off: installing the hooks failed ({type(e).__name__}: {e})")
            return False
        if self._ledger and os.environ.get("CACHETOOL_REMOTE"):
            from cachetool.remote.transfer import hook_from_env

            self.remote = hook_from_env()
        self.enabled = True
        return True

    def _patch_all(self) -> None:
        import datasets.arrow_dataset as ad
        import datasets.fingerprint as fp_mod
        from datasets.builder import DatasetBuilder

        patch = self.patches.patch
        local = self.local
        # Layer 2: the hash inputs, in every datasets module that imported the functions by name.
        originals = {
            "update_fingerprint": (fp_mod.update_fingerprint, self._wrap_update_fingerprint),
            "generate_random_fingerprint": (
                fp_mod.generate_random_fingerprint,
                lambda f: wrap_random(f, local),
            ),
            "generate_fingerprint": (ad.generate_fingerprint, self._wrap_generate_fingerprint),
            # Keeps the name, module and qualname: `datasets` hashes this very function object as
            # the transform of concatenate_datasets, and dill pickles it by reference to that name.
            "_concatenate_map_style_datasets": (
                ad._concatenate_map_style_datasets,
                lambda f: self._wrap_method(f, "concatenate_datasets", "concat"),
            ),
        }
        self.patches.patch_imported({name: (orig, make(orig)) for name, (orig, make) in originals.items()})
        patch(fp_mod.Hasher, "hash", wrap_hash(vars(fp_mod.Hasher)["hash"].__func__, local))

        # Layer 1: the edges (`set_format` changes the dataset in place: its result is `self`).
        methods = vars(ad.Dataset)
        edges = [(name, "transform") for name in _transforms(ad.Dataset)]
        for name, kind in (*edges, ("set_format", "inplace"), ("save_to_disk", "save")):
            patch(ad.Dataset, name, self._wrap_method(methods[name], name, kind))
        load = methods["load_from_disk"].__func__
        patch(ad.Dataset, "load_from_disk", self._wrap_method(load, "load_from_disk", "load_saved"))
        patch(ad.Dataset, "_get_cache_file_path", self._wrap_cache_path(methods["_get_cache_file_path"]))
        # The writers of cache files: what this process computes (not what another process wrote
        # in the meantime and `datasets` then loaded).
        map_single = methods["_map_single"].__func__
        patch(ad.Dataset, "_map_single", self._wrap_writer(map_single, "cache_file_name"))
        select = self._wrap_writer(methods["_select_with_indices_mapping"], "indices_cache_file_name")
        patch(ad.Dataset, "_select_with_indices_mapping", select)
        pool = ad.iflatmap_unordered
        self.patches.patch_imported({"iflatmap_unordered": (pool, self._wrap_pool(pool))})
        builders = vars(DatasetBuilder)
        patch(
            DatasetBuilder, "as_dataset", self._wrap_method(builders["as_dataset"], "as_dataset", "builder")
        )
        patch(DatasetBuilder, "download_and_prepare", self._wrap_prepare(builders["download_and_prepare"]))

    def uninstall(self) -> None:
        """Restore every patched attribute (the originals come back in reverse order)."""
        with contextlib.suppress(Exception):
            self.end_run()
        self.enabled = False
        self.patches.restore()
        with contextlib.suppress(Exception):
            self.sink.close()

    def _on_new_root(self, root: str) -> None:
        if self.enabled:
            hold_lease(root)  # this process may write here: gc on other hosts must know

    def _hook_failed(self, where: str, e: BaseException) -> None:
        self._hook_errors += 1
        if self._hook_errors == 1:
            says = "the pipeline is not affected, but its lineage may be incomplete"
            warn(f"a tracing hook failed in {where} ({type(e).__name__}: {e}); {says}")
        if os.environ.get("CACHETOOL_DEBUG"):
            import traceback

            traceback.print_exc()

    # -- the run ------------------------------------------------------------------------------
    def start_run(self) -> None:
        """The run starts: its start record goes to each root the run writes in, before the run's
        first record there (`enter_root`); `end_run` closes each."""
        if self._ledger and self.enabled:
            self._start = self.records.run_start()

    def enter_root(self, root: str, first: LedgerRecord | None = None) -> None:
        """The run is about to write in `root` (`first`: its first record there): its start record
        there, in the ledger `first` goes to, and a lease (gc on every host must know this writer).
        A root the run never writes in gets neither."""
        if root in self._entered or not self.enabled:
            return
        self._entered.add(root)
        hold_lease(root)
        if self._start is not None:
            self._emit(dataclasses.replace(self._start, root=root), like=first)

    def end_run(self) -> None:
        """Write the run's end to every root it wrote to: the run ended without being killed.
        Once; never in a forked child."""
        sink = self.sink
        if not (self.enabled and isinstance(sink, LedgerSink)) or self._ended or os.getpid() != self.pid:
            return
        self._ended = True
        if not sink.roots and (self._outcome or {}).get("status", 0) != 0:
            self.enter_root(self.roots.default)  # failed before writing anything: say so where users look
        for root in list(sink.roots):
            self._emit(RunEndRecord(**self.records.now(), root=root, **(self._outcome or {})))
        for root, hits in self._hits.items():
            if _older_than(hits, self._by_name):
                _warn_stale(root, set(hits))
        for root in list(sink.roots):  # a long ledger is compacted by the run that made it long
            if foldable_bytes(root) > AUTO_BYTES:
                from cachetool.history.compact import compact_if_large

                compact_if_large(root, wait=False)

    def note_exit(self, exc: BaseException | None) -> None:
        """How the script ended (`exc` None: normally), and from which step an exception came."""
        if exc is None or isinstance(exc, SystemExit):
            code = None if exc is None else exc.code
            self._outcome = {"status": code if isinstance(code, int) else 0 if code is None else 1}
            if exc is None or not self._outcome["status"]:
                return
        else:
            status = 130 if isinstance(exc, KeyboardInterrupt) else 1
            self._outcome = {"status": status, "exception": type(exc).__name__, "message": str(exc)[:2000]}
        seen: set[int] = set()
        e: BaseException | None = exc
        while e is not None and id(e) not in seen:  # the step's exception, or one it caused
            seen.add(id(e))
            if isinstance(e, KeyboardInterrupt) and e is not exc:  # Ctrl-C, then the pool's error
                self._outcome |= {"exception": "KeyboardInterrupt", "message": f"then {type(exc).__name__}"}
            if self._raised is not None and e is self._raised[0]:
                self._outcome["step"] = self._raised[1]
            e = e.__context__

    # -- layer 2 ------------------------------------------------------------------------------
    def _wrap_update_fingerprint(self, original: Callable[..., str]) -> Callable[..., str]:
        local = self.local

        @functools.wraps(original)
        def update_fingerprint(fingerprint: Any, transform: Any, transform_args: Any) -> str:
            if not self.enabled:
                return original(fingerprint, transform, transform_args)
            previous = local.watch
            local.watch = ev = HashEvent()  # what `Hasher.hash` sees inside this call
            try:
                result = original(fingerprint, transform, transform_args)
            finally:
                local.watch = previous
            try:
                self._on_hash(ev, fingerprint, transform, transform_args, result)
            except Exception as e:
                self._hook_failed("update_fingerprint", e)
            return result

        return update_fingerprint

    def _wrap_generate_fingerprint(self, original: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(original)
        def generate_fingerprint(dataset: Any) -> str:
            fp = original(dataset)
            if self.enabled and not self.local.stack:
                try:
                    _, call_site, entry = self.calls.call_site(sys._getframe(1))
                    self._emit(self.records.in_memory_root(dataset, fp, call_site, entry))
                except Exception as e:
                    self._hook_failed("generate_fingerprint", e)
            return fp

        return generate_fingerprint

    def _on_hash(self, ev: HashEvent, parent: Any, transform: Any, args: Any, result: str) -> None:
        ev.parent, ev.transform, ev.result, ev.seq = parent, transform, result, next(self.seq)
        # A copy: train_test_split reuses one dict for its two hashes, changing fingerprint_name.
        ev.args = args = dict(args) if isinstance(args, Mapping) else args
        if self._ledger and isinstance(args, Mapping) and callable(fn := args.get("function")):
            # Described now, before it runs: the values of its module it reads (`reads`) as a
            # run that loads the result sees them, not as the function itself left them.
            with contextlib.suppress(Exception):  # (the record says why, when it is built)
                self.arguments.function_info(fn)
        if self.arguments.trees and isinstance(args, Mapping):
            # Now, before the transform runs: a map may change the objects its function uses
            # (a tokenizer switching truncation on), and the tree must show what datasets hashed.
            ev.trees = {str(key): hash_tree(value) for key, value in args.items()}
        stack = self.local.stack
        if stack:
            stack[-1].hashes.append(ev)
            return
        # update_fingerprint outside any traced call (a method this tracer does not wrap).
        ev.start = time.time()
        _, ev.call_site, _ = self.calls.call_site(sys._getframe(1))
        self._emit(self.records.hash_step(ev, internal=False, root=self.roots.default))

    # -- layer 1 ------------------------------------------------------------------------------
    def _wrap_method(self, original: Callable[..., Any], op: str, kind: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return original(*args, **kwargs)
            named = named_files(kwargs) if kwargs else None  # as the script named them (see cold_args)
            if self.recompute and args:
                args, kwargs = cold_args(original, args, kwargs, self._fresh_path)
            try:
                frame = self.calls.enter(op, kind, original, args, kwargs, sys._getframe(1))
                if named:
                    frame.named = named
            except Exception as e:
                self._hook_failed(op, e)
                return original(*args, **kwargs)
            if kind == "save":
                self._note_save(frame)
            try:
                out = original(*args, **kwargs)
            except BaseException as e:
                self._exit(frame, None, e)
                raise
            self._exit(frame, out, None)
            return out

        return wrapper

    def _wrap_cache_path(self, original: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(original)
        def _get_cache_file_path(self_ds: Any, fingerprint: str) -> str:
            path = original(self_ds, fingerprint)
            if self.recompute and self.enabled:
                path = self._fresh_path(path)
            if self.enabled and self.local.stack:
                try:
                    once = self.once and not self.recompute
                    if once:  # before anything looks at the cache
                        self._take_turn(path)
                    if self.remote is not None:  # a miss here may be a hit on the remote
                        self.remote.before_compute(path, self.local.stack[-1].kwargs, once)
                    self.calls.snapshot(path)
                    self._note_start(path)
                    self._resume(path)
                except Exception as e:
                    self._hook_failed("_get_cache_file_path", e)
            return path

        return _get_cache_file_path

    def _wrap_writer(self, original: Callable[..., Any], name: str) -> Callable[..., Any]:
        """A `datasets` function that writes the cache file named by its argument `name`."""
        local = self.local

        @functools.wraps(original)
        def writer(*args: Any, **kwargs: Any) -> Any:
            path = kwargs.get(name)
            if path and local.stack:
                local.writes.add(abs_path(path))
            return original(*args, **kwargs)

        return writer

    def _wrap_pool(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """`iflatmap_unordered`: a num_proc map's workers write the shards this process computes."""
        local = self.local

        @functools.wraps(original)
        def iflatmap_unordered(pool: Any, func: Any, *, kwargs_iterable: Any) -> Any:
            if local.stack:
                kwargs_iterable = list(kwargs_iterable)
                for kwargs in kwargs_iterable:
                    if isinstance(kwargs, Mapping) and kwargs.get("cache_file_name"):
                        local.writes.add(abs_path(kwargs["cache_file_name"]))
            return original(pool, func, kwargs_iterable=kwargs_iterable)

        return iflatmap_unordered

    def _take_turn(self, path: str) -> None:
        """`--once`: wait while another process computes this step; take its lease when none
        does (given back when the user's call ends, in `_exit`)."""
        kwargs = self.local.stack[-1].kwargs
        if kwargs.get("load_from_cache_file") is False or kwargs.get("keep_in_memory"):
            return  # computed by every process whatever the others do
        folder = os.path.dirname(abs_path(path))
        if os.path.basename(folder).startswith("hf_datasets-"):
            return  # caching is off: each process writes its own temporary file
        from cachetool.trace.once import take_turn

        held = self.local.once
        lease = take_turn(path, self.roots.of_folder(folder), may_wait=not held, say=warn_note)
        if lease is not None:
            held.append(lease)

    def _fresh_path(self, path: str, parent: Any = None) -> str:
        """`fresh_path`, or `path` when that fails (the failure said once)."""
        try:
            return fresh_path(path, parent)
        except Exception as e:
            self._hook_failed("_get_cache_file_path", e)
            return path

    def _wrap_prepare(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def download_and_prepare(builder: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return original(builder, *args, **kwargs)
            # datasets decides under its lock whether to generate: only then does it call the
            # builder's `_download_and_prepare`. A run that waited for another run's preparation
            # generates nothing; the output folder missing before the call does not say that.
            generated: list[bool] = []
            watched = False  # where the counter could not be put in place, the load counts as a miss
            with contextlib.suppress(Exception):
                self.enter_root(local_path(builder._cache_dir_root) or self.roots.default)
                prepare = builder._download_and_prepare

                def mark(*a: Any, **kw: Any) -> Any:
                    generated.append(True)
                    self._note_prepare(builder)
                    return prepare(*a, **kw)

                builder.__dict__["_download_and_prepare"] = mark
                watched = True
            began = time.time()
            try:
                out = original(builder, *args, **kwargs)
            finally:
                builder.__dict__.pop("_download_and_prepare", None)
            with contextlib.suppress(Exception):
                builder.__dict__["_cachetool_prepared"] = "miss" if generated or not watched else "hit"
                if generated:  # the step `as_dataset` records began here: most of its time
                    builder.__dict__["_cachetool_prepare_time"] = (began, time.time() - began)
            return out

        return download_and_prepare

    def _note_start(self, path: str) -> None:
        """The user's step is about to compute: say so now, so that a run killed inside it still
        tells which step it was and where it wrote. Cache hits write nothing."""
        stack = self.local.stack
        top = stack[0]
        if top.started or not self._ledger:
            return
        path = abs_path(path)
        if (
            self.local.snapshot.get(path) is not None
            and stack[-1].kwargs.get("load_from_cache_file") is not False
        ):
            return
        top.started = True
        self._emit(self.records.step_start(top, path))

    def _note_save(self, frame: Frame) -> None:
        """The user's `save_to_disk` is about to write its folder: say so in the run's own ledger,
        so that a run killed inside it still tells which folder it left unfinished."""
        if not self._ledger or frame.internal or self.local.stack[0] is not frame:
            return
        with contextlib.suppress(Exception):
            record = self.records.save_start(frame)
            if record is not None:
                self._emit(record)

    def _note_prepare(self, builder: Any) -> None:
        """`load_dataset` is about to prepare `builder`'s folder: say so in the ledger, so that a
        run killed in it still tells which call it was and what it left unfinished."""
        if not self._ledger or self.local.stack:
            return
        with contextlib.suppress(Exception):
            record = self.records.prepare_start(builder, sys._getframe(2), self.calls)
            if record is not None:
                self._emit(record)

    def _resume(self, path: str) -> None:
        """A map about to compute: reuse what its killed attempt wrote (`resume`), else, with
        `reuse_equivalent`, an equivalent earlier result (`rekey`); untraced."""
        top = self.local.stack[-1]
        if top.op == "map" and len(self.local.stack) == 1 and top.started and not os.path.exists(path):
            from cachetool.trace.resume import resume_map  # only when a map computes

            self.enabled = False
            try:
                path = abs_path(path)
                root = self.roots.of_folder(os.path.dirname(path))
                top.resumed = resume_map(top.original, top.args, top.kwargs, path, root, self.sink.run_id)
                if top.resumed is not None:
                    self.local.writes.add(path)  # written here, from the killed attempt's rows
                if top.resumed is None and self.reuse_equivalent and self._ledger:
                    self._rekey(top, path, root)
            finally:
                self.enabled = True

    def _rekey(self, top: Frame, path: str, root: str) -> None:
        from cachetool.trace.rekey import rekey_map

        fp = os.path.basename(path).removeprefix("cache-").removesuffix(".arrow")
        h = next((x for x in top.hashes if x.result == fp), None)
        if h is None or top.call_site is None:
            return
        hashed = self.arguments.hashed(h)
        say = functools.partial(warn, kind="")
        top.rekeyed = rekey_map(top.original, top.args, top.kwargs, path, root, hashed, top.call_site, say)
        if top.rekeyed is not None:
            self.local.writes.add(path)  # written here, from the equivalent result

    def _exit(self, frame: Frame, out: Any, exc: BaseException | None) -> None:
        local = self.local
        stack = local.stack
        try:
            self.calls.leave(frame)
            records = self.records.steps(frame, out, exc)
            if stack:
                # Nested calls finish first; hold their records so that the file is in call order.
                stack[-1].children.extend(records)
                stack[0].pending.extend(records)
            else:
                if exc is not None:
                    self._raised = (exc, frame.seq)
                frame.pending.extend(records)
                frame.pending.sort(key=lambda r: r.seq)
                for rec in frame.pending:
                    self._emit(rec)
                if self.remote is not None and exc is None:
                    self.remote.after_compute(frame.pending)  # what computed goes to the remote
        except Exception as e:
            self._hook_failed(frame.op, e)
        finally:
            if not stack:
                local.snapshot.clear()
                local.writes.clear()
                if local.once:
                    from cachetool.trace.once import give_back

                    give_back(local.once)
                if self.remote is not None:
                    self.remote.end_call()  # after the push: the others pull what it sent

    def _emit(self, record: LedgerRecord, like: LedgerRecord | None = None) -> None:
        if (record.root or self.roots.default) not in self._entered:
            self.enter_root(record.root or self.roots.default, record)
        if self._prefix is None:
            # "v", "run", "host", "pid" and "versions" are the same in every record of the process:
            # encoded once (encoding them each time is a third of the cost of a record).
            self._prefix = ENCODER.encode(record.constant_json())[:-1] + ","
        if self._ledger and isinstance(record, StepRecord):
            for src in self.records.sources(record, record.function) if record.function else ():
                self.sink.emit_line(src, self._prefix + ENCODER.encode(src.to_json(constant=False))[1:])
            root = record.root or self.roots.default
            if record.cache == "hit" and record.result:
                self._hits.setdefault(root, {})[record.result] = tuple(f.path for f in record.files)
                if record.TYPE == "transform" and record.files and not record.internal:
                    _check_named_file(record, record.result, record.files[0].path)
            if record.may_go_stale and (fn := record.function):
                sources = self._by_name
                for part in (fn, *fn.deps):
                    sources.update([part.file] if part.file else ())
                    sources.update(_module_file(name) for name in part.reads if "." in name)
                sources.update(f.path for f in (record.source.gen_files if record.source else ()))
            rf = record.random_fallback
            if rf and rf.predictable and not record.internal and record.call_site not in self._warned:
                from cachetool.history.explain.reasons import predictable_warning

                self._warned.add(record.call_site)  # once per call site (DatasetDict.map: per split)
                warn(predictable_warning(record, rf))
        self.sink.emit_line(record, self._prefix + ENCODER.encode(record.to_json(constant=False))[1:], like)


def _check_named_file(record: StepRecord, fp: str, path: str) -> None:
    """Warn when a step loaded a file it named (`cache_file_name=`) that an earlier version of the
    step wrote: `datasets` loads a named file whatever the fingerprint."""
    if parse_cache_file(os.path.basename(path)) is not None:
        return  # a name `datasets` gives: nothing to read (and no `stale` to import) on each hit
    from cachetool.history.explain.stale import written_under

    written = written_under(fp, path)
    if written:
        site = record.call_site
        where = f" @ {os.path.basename(site.file or '?')}:{site.line}" if site else ""
        warn(
            f"{record.operation}{where} loaded {path} (its cache_file_name=), which was written under "
            f"fingerprint {written}, not this step's {fp}: datasets loads a named file whatever "
            "changed, so it is probably stale. Hint: remove the file (or pass "
            "load_from_cache_file=False) to compute it again"
        )


def _module_file(read: str) -> str:
    """The file of the module whose value `read` (`config.MAX_LEN`) names ("" when none)."""
    module = sys.modules.get(read.rsplit(".", 1)[0])
    return str(getattr(module, "__file__", None) or "")


def _older_than(hits: dict[str, tuple[str, ...]], sources: set[str]) -> bool:
    """Whether a file of `hits` was last written before a file of `sources` was: only then can a
    loaded result be stale (reading the ledger to know costs a fraction of a second)."""

    def mtimes(paths: Iterable[str]) -> list[float]:
        out = []
        for path in paths:
            with contextlib.suppress(OSError):
                out.append(os.stat(path).st_mtime)
        return out

    loaded = mtimes(p for files in hits.values() for p in files)
    edited = mtimes(sources)
    return bool(loaded and edited) and min(loaded) < max(edited)


def _warn_stale(root: str, fps: set[str]) -> None:
    """Say on stderr which results the run loaded were computed by code of the user's modules that
    has changed since (`datasets` hashes it by name, so it reused them), and what was made from
    them: one warning per root, the first cause named, the others counted."""
    from cachetool.hints import shell_command
    from cachetool.history.explain.stale import stale_hits

    try:
        found = stale_hits(root, only=fps)
        found = [s for s in found if not (s.predictable or s.written_under)]  # those warned at the hit
    except Exception:  # a warning only: never fails the run
        return
    if not found:
        return
    first = next((s for s in found if s.derived_from is None), found[0])
    every = tuple(dict.fromkeys(fp for s in found for fp in (s.remove or (s.fingerprint,))))
    sources = any(s.remove_sources or s.source for s in found)
    first = dataclasses.replace(first, remove=every, remove_sources=sources)  # its hint removes them all
    explain = shell_command("explain", "--last", "--cache-dir", root)
    said = f"this run loaded {len(found)} stale result(s): {first.message}"
    warn(f"{said}. Hint: {first.hint}; `{explain}` names each")


# The determinism runner's cold run (`Tracer.recompute`): every step computes, and writes where a
# plain run would unless the cache already holds that step.


def cold_args(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], fresh: Any) -> Any:
    """The call's arguments for the cold run: `load_from_cache_file=False`, and each file the
    script names through `fresh(path, parent)` (unchanged for a transform without that parameter)."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):  # a call that raises anyway
        return args, kwargs
    if "load_from_cache_file" not in bound.signature.parameters:
        return args, kwargs
    given = bound.arguments
    given["load_from_cache_file"] = False
    for name in FILE_NAME_ARGS:
        path = given.get(name)
        if isinstance(path, (str, os.PathLike)):
            given[name] = fresh(os.fspath(path), args[0])
    return bound.args, bound.kwargs


def fresh_path(path: str, parent: Any = None) -> str:
    """Where the cold run writes a step: where a plain run would, unless the cache holds that step
    (its file or `num_proc` shards: a reader may have it open) or its parent was written aside;
    then a temporary folder, as `datasets` does with caching off."""
    folder, name = os.path.split(path)
    stem = name[: -len(".arrow")] + "_" if name.endswith(".arrow") else None
    fp_mod = sys.modules["datasets.fingerprint"]
    made = getattr(fp_mod, "_TEMP_DIR_FOR_TEMP_CACHE_FILES", None)  # made on first use
    aside = (
        made is not None
        and parent is not None
        and any(os.path.dirname(os.path.abspath(f["filename"])) == made.name for f in parent.cache_files)
    )
    if not (
        aside
        or os.path.lexists(path)
        or (stem and os.path.isdir(folder) and any(n.startswith(stem) for n in os.listdir(folder)))
    ):
        return path
    temp = fp_mod.get_temporary_cache_files_directory()
    return os.path.join(temp, f"cache-{os.urandom(8).hex()}.arrow")
