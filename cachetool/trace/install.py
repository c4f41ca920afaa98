"""Tracing on and off in this process (`tracing()`, `install_tracing()`, a determinism run's
settings, the import hook on the script's `import datasets`). Imports neither `datasets` (scripts
set its variables first) nor `typing`: `cachetool run`'s launcher imports this module.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Iterator, Sequence
    from types import ModuleType

    from cachetool.trace.tracer import Tracer

#: Set by the determinism runner: write every event to this file instead of the ledger.
EVENTS_ENV = "CACHETOOL_TRACE_EVENTS"
#: Set by the determinism runner: add hash trees to the events.
TREES_ENV = "CACHETOOL_TRACE_TREES"
#: Set by the determinism runner for its cold run: every transform computes (nothing is loaded
#: from the cache; what the cache lacks is written there, what it holds is left alone).
COLD_ENV = "CACHETOOL_TRACE_COLD"
#: Set by the determinism runner when it sets PYTHONHASHSEED: the user's own value ("" for none).
SEED_ENV = "CACHETOOL_USER_PYTHONHASHSEED"
#: Set by `cachetool run --reuse-equivalent`: a map about to compute takes an equivalent earlier
#: result once sampled batches prove it (`cachetool.trace.rekey`).
REUSE_ENV = "CACHETOOL_REUSE_EQUIVALENT"
#: Set by `cachetool run --once`: a step another process computes is waited for, then loaded.
ONCE_ENV = "CACHETOOL_ONCE"
_RUN_VARIABLES = (EVENTS_ENV, TREES_ENV, COLD_ENV, SEED_ENV, REUSE_ENV, ONCE_ENV)
#: Set by the determinism runner: marks every process of one run (inherited through fork, exec and
#: setsid), so the processes a run leaves behind can be found and stopped even when they left its
#: process group. Kept in the process's environment, out of ``os.environ`` (its value is new in each
#: run: a script that hashes its environment would differ by it).
RUN_MARKER_ENV = "CACHETOOL_CHECK_RUN"

#: One sequence for tracer events and `cachetool.checkpoint()` events, so that `seq` orders both.
event_counter = itertools.count()
_taken: dict[str, str] | None = None  # the run's settings, once `take_environment()` took them

_lock = threading.RLock()
_tracer: Tracer | None = None
#: The settings the import hook installs the tracer with once `datasets` is imported.
_pending: tuple[str | None, bool, bool] | None = None
_at_fork_registered = False
_reuse_equivalent = False  # `tracing(reuse_equivalent=True)`
_once = False  # `prepare_once()`


def take_environment() -> None:
    """Before the script runs: take the run's ``CACHETOOL_*`` variables out of ``os.environ`` (and
    put the user's ``PYTHONHASHSEED`` back), so the script sees the environment of a plain run; the
    run marker stays in the process's environment."""
    global _taken
    _taken = {k: os.environ.pop(k) for k in _RUN_VARIABLES if k in os.environ}
    # Out of the mapping only (no unsetenv): the processes the script starts still inherit it.
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        data.pop(os.environ.encodekey(RUN_MARKER_ENV), None)
    if _taken.get(SEED_ENV):
        os.environ["PYTHONHASHSEED"] = _taken[SEED_ENV]
    elif SEED_ENV in _taken:
        os.environ.pop("PYTHONHASHSEED", None)


def run_settings() -> tuple[str, bool, bool]:
    """(events file, hash trees wanted, cold run) of this process, from the determinism runner."""
    settings = _taken if _taken is not None else os.environ
    on = [settings.get(key, "") not in ("", "0", "false", "no") for key in (TREES_ENV, COLD_ENV)]
    return settings.get(EVENTS_ENV, ""), on[0], on[1]


def active_tracer() -> Tracer | None:
    """The installed tracer, if the hooks are in place."""
    return _tracer


def install_tracing(events_file: str | os.PathLike[str] | None = None) -> None:
    """Record every transform call of `datasets` from now on (in this process).

    Records go to the ledger of the cache root each call belongs to, or, when `events_file` is given
    or `CACHETOOL_TRACE_EVENTS` is set, to that JSON Lines file instead (the determinism runner's
    mode; `CACHETOOL_TRACE_TREES=1` adds hash trees). If `datasets` is not imported yet, the hooks
    are installed when it is. Never raises: a problem is one warning on stderr, and the pipeline
    runs untraced.
    """
    global _pending
    with _lock:
        if _tracer is not None or _pending:
            return
        # Read now: `cachetool run` removes these variables before the script's code runs.
        env_events, trees, cold = run_settings()
        events = (env_events if events_file is None else os.fspath(events_file)) or None
        if sys.modules.get("datasets") is not None:
            _install_now(events, trees, cold)
            return
        _pending = (events, trees, cold)
        sys.meta_path.insert(0, _Finder())


def _on_datasets_imported() -> None:
    global _pending
    with _lock:
        settings, _pending = _pending, None
        if settings is not None:
            _install_now(*settings)


def _install_now(events: str | None, trees: bool, cold: bool) -> None:
    global _tracer, _at_fork_registered
    try:
        from cachetool.trace.tracer import EventsSink, LedgerSink, Tracer

        sink = EventsSink(events, trees) if events else LedgerSink()
        tracer = Tracer(sink, event_counter)
        # The determinism runner's cold run: every step computes, so what a step changes in its
        # function's objects shows; it writes where a plain run would, for the next run to load.
        tracer.recompute = bool(cold and events)
        settings = _taken if _taken is not None else os.environ
        tracer.reuse_equivalent = _reuse_equivalent or settings.get(REUSE_ENV, "") not in ("", "0")
        tracer.once = _once or settings.get(ONCE_ENV, "") not in ("", "0")
        if not tracer.install():
            sink.close()
            return
        _tracer = tracer
        if not _at_fork_registered:  # handlers cannot be unregistered: one per process
            os.register_at_fork(after_in_child=_after_fork)
            atexit.register(end_run)
            _at_fork_registered = True
        tracer.start_run()
    except Exception as e:  # never raise into the user's code
        with contextlib.suppress(Exception):
            sys.stderr.write(f"cachetool: warning: tracing is off ({type(e).__name__}: {e})\n")


def end_run() -> None:
    """At exit: the run ended (a SIGKILL never gets here, and that is how a killed run shows).
    Once: `cachetool run` calls it before a KeyboardInterrupt leaves the script, since code run at
    exit clears CPython's note of the interrupt (the process would end with 1, not by SIGINT)."""
    if _tracer is not None:
        with contextlib.suppress(Exception):
            _tracer.end_run()


def note_exit(exc: BaseException | None) -> None:
    """`cachetool run`: the script ended, normally (`exc` None) or by `exc`; the run's end record
    says how. Never raises."""
    if _tracer is not None:
        with contextlib.suppress(Exception):
            _tracer.note_exit(exc)


def _after_fork() -> None:
    if _tracer is not None:
        _tracer.enabled = False  # a num_proc worker's calls are datasets' own business


def uninstall_tracing() -> None:
    """Remove the hooks (the original `datasets` functions come back) and close the ledger files."""
    global _tracer, _pending
    with _lock:
        if _pending:
            _remove_finder()
            _pending = None
        if _tracer is not None:
            from cachetool.trace.leases import release_all

            _tracer.uninstall()
            _tracer = None
            release_all()


@contextlib.contextmanager
def tracing(
    events_file: str | os.PathLike[str] | None = None, *, reuse_equivalent: bool = False, once: bool = False
) -> Iterator[None]:
    """Record the `datasets` transform calls made inside the block::

        with cachetool.tracing():
            ds = load_dataset("csv", data_files="x.csv", split="train").map(f)

    `reuse_equivalent` (as `cachetool run --reuse-equivalent`): a `map` about to compute under a
    new fingerprint takes the earlier result of its call site on the same input, with the same
    function source, once sampled batches computed again equal it (docs/resume.md).
    `once` (as `cachetool run --once`; `prepare_once()`): a step that another process is
    computing in the same cache is waited for, then loaded (docs/hosts.md).
    Hooks installed before the block (by `cachetool run` or `install_tracing()`) stay after it.
    """
    global _reuse_equivalent, _once
    already = _tracer is not None or _pending
    before = _reuse_equivalent, _once
    _reuse_equivalent, _once = _reuse_equivalent or reuse_equivalent, _once or once
    install_tracing(events_file)
    tracer = _tracer
    was = (tracer.reuse_equivalent, tracer.once) if tracer is not None else (False, False)
    if tracer is not None:
        tracer.reuse_equivalent, tracer.once = was[0] or reuse_equivalent, was[1] or once
    try:
        yield
    finally:
        _reuse_equivalent, _once = before
        if tracer is not None:
            tracer.reuse_equivalent, tracer.once = was
        if not already:
            uninstall_tracing()


@contextlib.contextmanager
def prepare_once() -> Iterator[None]:
    """Compute each step of the block once among every process that runs it on one cache::

        with cachetool.prepare_once():  # in every rank of a job
            ds = load_dataset("csv", data_files="x.csv", split="train").map(tokenize)

    Tracing (as `tracing()`) with `cachetool run --once`'s behaviour: the first process to reach a
    step its cache does not hold takes a lease on the step's fingerprint (in the root's
    `.cachetool/once/`) and computes it; the others wait until that lease is gone, then load the
    result as a cache hit. A leader killed on this host is seen dead at once, one on another
    host once its lease expires (`CACHETOOL_LEASE_SECONDS`); then one waiter takes over
    (docs/hosts.md).
    """
    with tracing(once=True):
        yield


class _Finder:
    """At the front of `sys.meta_path`: installs the hooks once the script's `import datasets` has
    executed (without `importlib.abc`, which imports too much for a script that never uses it)."""

    _busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "datasets" or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.on = False
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            del loader.exec_module  # the loader as it was: the module looks imported normally
            run(module)
            _remove_finder()
            _on_datasets_imported()  # never raises: the import itself succeeded

        with contextlib.suppress(AttributeError):  # a loader that takes no attribute: untraced
            loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _remove_finder() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
