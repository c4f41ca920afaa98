"""The tracer: hooks into `datasets` that record every transform call while a pipeline runs.

Two layers (DESIGN.md, Tracing):

1. The transform methods and entry points (`Dataset.map`, the `fingerprint_transform`-decorated
   methods, `concatenate_datasets`, `DatasetBuilder.as_dataset`, `load_from_disk`, `save_to_disk`)
   are wrapped in *frames* (`calls`): input fingerprint(s) -> result fingerprint(s), the files
   written or reused, duration, call site. This layer also sees steps given `new_fingerprint=`.
2. `update_fingerprint`, `generate_random_fingerprint` and `generate_fingerprint`, replaced in every
   `datasets` module that imported them by name, give the hash inputs (`arguments`). The
   per-argument digests come from watching `Hasher.hash` inside the original call (no second
   pickling), and the exception `datasets` swallows before falling back to a random fingerprint is
   caught on its way.

Every hook calls the original and returns its result unchanged; the bookkeeping around it runs
under `try/except Exception` and is switched off in forked children (a `num_proc` pool worker).
Putting the hooks in place and taking them out is `install`; the watch of `Hasher.hash` is
`hashwatch`; the records are built by `records` and `origins` and go to a sink (`sinks`); `roots`
says which ledger each belongs to; `coldrun` is the determinism runner's cold run.

Known limits: calls made in forked children (datasets' own `num_proc` workers, but also a user's
own fork pool) and in spawned children (fresh interpreters) are not recorded; `IterableDataset`
(streaming) and `DatasetDict` methods are seen through the `Dataset` calls they make.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.steps import StepRecord
from cachetool.history.writer import ENCODER
from cachetool.trace.arguments import Arguments
from cachetool.trace.calls import Calls, Frame, Watch
from cachetool.trace.coldrun import fresh_path, positions, recomputed_args
from cachetool.trace.hashwatch import hash_event, watched, wrap_hash, wrap_random
from cachetool.trace.install import (
    INPLACE_METHODS,
    HookPoints,
    Patches,
    find_hook_points,
    library_versions,
    traced_methods,
    warn,
)
from cachetool.trace.records import RecordBuilder
from cachetool.trace.roots import Roots, abs_path
from cachetool.trace.settings import event_counter
from cachetool.trace.sinks import EventsSink, LedgerSink

__all__ = ["Tracer"]


class Tracer:
    """Installs the hooks into an imported `datasets` and turns what they see into records."""

    def __init__(self, sink: LedgerSink | EventsSink) -> None:
        self.sink = sink
        self.enabled = False
        self.pid = os.getpid()
        self.host = socket.gethostname()
        # Summaries and source texts are for the ledger; the determinism runner has full trees.
        self._ledger = isinstance(sink, LedgerSink)
        self.calls = Calls(event_counter)
        self.local = self.calls.local
        self.roots = Roots(self._on_new_root)
        self.arguments = Arguments(trees=isinstance(sink, EventsSink) and sink.trees, summaries=self._ledger)
        self.records = RecordBuilder(
            run=sink.run_id,
            host=self.host,
            pid=self.pid,
            seq=event_counter,
            roots=self.roots,
            arguments=self.arguments,
            ledger=self._ledger,
        )
        self.patches = Patches()
        self.untraced: list[str] = []  # methods this datasets version lacks
        self._hook_errors = 0
        self._prefix: str | None = None
        self._ended = False
        #: How the run ended, once the runner says (`note_exit`): status, exception, message.
        self._outcome: tuple[int, str | None, str | None] | None = None
        #: The last exception that came out of a step the user called, with the step's `seq`.
        self._raised: tuple[BaseException, int] | None = None
        self._raised_at_exit: BaseException | None = None
        #: The determinism runner's cold run: every step computes (`load_from_cache_file=False`)
        #: and writes where a plain run would, so the next run loads what it made.
        self.recompute = False

    @property
    def default_root(self) -> str:
        """The process's cache root (`HF_DATASETS_CACHE` when `datasets` was imported)."""
        return self.roots.default

    @property
    def _patches(self) -> list[tuple[Any, str, Any]]:
        """(object, name, original) of every attribute replaced."""
        return self.patches.patches

    # -- installation -----------------------------------------------------------------------
    def install(self) -> bool:
        """Patch the imported `datasets`. Returns False (after one warning) when a hook point is
        missing: the pipeline then runs untraced."""
        points = find_hook_points()
        if points is None:
            return False
        datasets = points.datasets
        names, self.untraced = traced_methods(points.dataset_cls)
        if self.untraced:
            warn(
                f"this datasets {getattr(datasets, '__version__', '?')} has no "
                f"{', '.join(self.untraced)}: calls of those are not traced; everything else is"
            )
        self.calls.datasets_prefix = os.path.dirname(os.path.abspath(datasets.__file__)) + os.sep
        self.roots.default = abs_path(str(datasets.config.HF_DATASETS_CACHE))
        if isinstance(self.sink, LedgerSink):
            self.sink.cache_root = self.roots.default
        self.records.constants["versions"] = library_versions()
        try:
            self._patch_all(points, names)
        except Exception as e:
            self.uninstall()
            warn(f"tracing is off: installing the hooks failed ({type(e).__name__}: {e})")
            return False
        self.enabled = True
        return True

    def _patch_all(self, points: HookPoints, transforms: list[str]) -> None:
        fp_mod, ad, dataset_cls, builder_cls = (
            points.fingerprint,
            points.arrow_dataset,
            points.dataset_cls,
            points.builder_cls,
        )
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
        patch(points.hasher, "hash", wrap_hash(vars(points.hasher)["hash"].__func__, local))

        # Layer 1: the edges.
        methods = vars(dataset_cls)
        for name in transforms:
            patch(dataset_cls, name, self._wrap_method(methods[name], name, "transform"))
        for name in INPLACE_METHODS:
            patch(dataset_cls, name, self._wrap_method(methods[name], name, "inplace"))
        patch(dataset_cls, "save_to_disk", self._wrap_method(methods["save_to_disk"], "save_to_disk", "save"))
        load = methods["load_from_disk"].__func__
        patch(dataset_cls, "load_from_disk", self._wrap_method(load, "load_from_disk", "load_saved"))
        patch(dataset_cls, "_get_cache_file_path", self._wrap_cache_path(methods["_get_cache_file_path"]))
        builders = vars(builder_cls)
        patch(builder_cls, "as_dataset", self._wrap_method(builders["as_dataset"], "as_dataset", "builder"))
        patch(builder_cls, "download_and_prepare", self._wrap_prepare(builders["download_and_prepare"]))

    def uninstall(self) -> None:
        """Restore every patched attribute (the originals come back in reverse order)."""
        with contextlib.suppress(Exception):
            self.end_run()
        self.enabled = False
        self.patches.restore()
        with contextlib.suppress(Exception):
            self.sink.close()

    def after_fork(self) -> None:
        # A num_proc worker inherits the hooks; its calls are datasets' own business, and its
        # records would land in the parent's segment. Pass everything through.
        self.enabled = False

    def _on_new_root(self, root: str) -> None:
        if self.enabled:
            from cachetool.trace.lease import hold_lease

            hold_lease(root)  # this process may write here: gc on other hosts must know

    def _hook_failed(self, where: str, e: BaseException) -> None:
        self._hook_errors += 1
        if self._hook_errors == 1:
            warn(
                f"a tracing hook failed in {where} ({type(e).__name__}: {e}); the pipeline is not "
                "affected, but its lineage may be incomplete"
            )
        if os.environ.get("CACHETOOL_DEBUG"):
            import traceback

            traceback.print_exc()

    # -- the run ------------------------------------------------------------------------------
    def start_run(self) -> None:
        """Write the run's start to the ledger of the process's cache root (`end_run` closes it)."""
        if self._ledger and self.enabled:
            self._emit(self.records.run_start())

    def end_run(self) -> None:
        """Write the run's end to every root it wrote to: the run ended without being killed.
        Once; never in a forked child."""
        sink = self.sink
        if not (self.enabled and isinstance(sink, LedgerSink)) or self._ended or os.getpid() != self.pid:
            return
        self._ended = True
        status, exception, message = self._outcome or (None, None, None)
        step = None
        if self._raised is not None and self._outcome is not None:
            raised, seq = self._raised
            step = seq if self._raised_at_exit is raised else None
        for root in list(sink.roots):
            self._emit(self.records.run_end(root, status, exception, message, step))

    def note_exit(self, exc: BaseException | None) -> None:
        """How the script ended: normally (`exc` None), by `SystemExit`, or by an uncaught
        exception (which step it came out of is known when it went through one). The run's end
        record says it."""
        self._raised_at_exit = None
        if exc is None:
            self._outcome = (0, None, None)
        elif isinstance(exc, SystemExit):
            code = exc.code
            self._outcome = (code if isinstance(code, int) else 0 if code is None else 1, None, None)
        else:
            status = 130 if isinstance(exc, KeyboardInterrupt) else 1
            self._outcome = (status, type(exc).__name__, str(exc)[:2000])
            seen: set[int] = set()
            e: BaseException | None = exc
            while e is not None and id(e) not in seen:  # the step's exception, or one it caused
                seen.add(id(e))
                if self._raised is not None and e is self._raised[0]:
                    self._raised_at_exit = e
                    break
                e = e.__context__

    # -- layer 2 ------------------------------------------------------------------------------
    def _wrap_update_fingerprint(self, original: Callable[..., str]) -> Callable[..., str]:
        local = self.local

        @functools.wraps(original)
        def update_fingerprint(fingerprint: Any, transform: Any, transform_args: Any) -> str:
            if not self.enabled:
                return original(fingerprint, transform, transform_args)
            result, watch = watched(local, original, fingerprint, transform, transform_args)
            try:
                self._on_hash(fingerprint, transform, transform_args, result, watch)
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

    def _on_hash(self, parent: Any, transform: Any, args: Any, result: str, watch: Watch) -> None:
        ev = hash_event(parent, transform, args, result, watch, trees=self.arguments.trees)
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
        at = positions(original)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return original(*args, **kwargs)
            if self.recompute and at is not None:
                args, kwargs = recomputed_args(args, kwargs, at, self._fresh_path)
            try:
                frame = self.calls.enter(op, kind, original, args, kwargs, sys._getframe(1))
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

    def _wrap_cache_path(self, original: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(original)
        def _get_cache_file_path(self_ds: Any, fingerprint: str) -> str:
            path = original(self_ds, fingerprint)
            if self.recompute and self.enabled:
                path = self._fresh_path(path)
            if self.enabled and self.local.stack:
                try:
                    self.calls.snapshot(path)
                    self._note_start(path)
                except Exception as e:
                    self._hook_failed("_get_cache_file_path", e)
            return path

        return _get_cache_file_path

    def _fresh_path(self, path: str, parent: Any = None) -> str:
        """`coldrun.fresh_path`, or `path` when that fails (the failure said once)."""
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
            existed = None
            with contextlib.suppress(Exception):
                existed = os.path.isdir(builder._output_dir)
            out = original(builder, *args, **kwargs)
            with contextlib.suppress(Exception):
                builder.__dict__["_cachetool_prepared"] = "hit" if existed else "miss"
            return out

        return download_and_prepare

    def _note_start(self, path: str) -> None:
        """The user's step is about to compute (its output file is not there to load, or it was
        told not to load it): say so now, so that a run killed inside the step still tells which
        step it was and where it wrote. Cache hits write nothing here."""
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

    def _exit(self, frame: Frame, out: Any, exc: BaseException | None) -> None:
        local = self.local
        stack = local.stack
        try:
            duration = self.calls.leave(frame)
            records = self.records.steps(frame, out, exc, duration, local.snapshot)
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
            for src in self.records.sources(record, record.function):
                self.sink.emit_line(src, self._prefix + ENCODER.encode(src.to_json(constant=False))[1:])
        self.sink.emit_line(record, self._prefix + ENCODER.encode(record.to_json(constant=False))[1:])
