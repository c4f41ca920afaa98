"""In-process recording of `datasets` fingerprinting: `tracing()`, `install_tracing()`.

Nothing here imports `datasets`: it reads `HF_DATASETS_CACHE` and friends when it is imported, and
scripts commonly set them first. When `datasets` is not imported yet, an import hook installs the
hooks the moment the script imports it.

Owns the tracer, the lease a traced process holds (`lease`) and the rules of leases that gc and
verify judge (`leases`). May import `history`, `cache`, `fingerprint` and the base modules.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading

TYPE_CHECKING = False  # no `typing` for `cachetool run`'s launcher, which imports this package
if TYPE_CHECKING:
    from collections.abc import Iterator

    from cachetool.trace.tracer import Tracer

__all__ = ["active_tracer", "install_tracing", "tracing", "uninstall_tracing"]

_lock = threading.RLock()
_tracer: Tracer | None = None
_pending = False  # the import hook waits for `datasets`


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
        from cachetool.trace.settings import run_settings

        # Read now: `cachetool run` removes these variables before the script's code runs.
        env_events, trees, cold = run_settings()
        events = env_events if events_file is None else os.fspath(events_file)
        if "datasets" in sys.modules and getattr(sys.modules["datasets"], "__spec__", None) is not None:
            _install_now(events or None, trees, cold)
            return
        from cachetool.trace.importhook import add_post_import_hook

        _pending = True
        add_post_import_hook("datasets", lambda _module: _on_datasets_imported(events or None, trees, cold))


def _on_datasets_imported(events: str | None, trees: bool, cold: bool) -> None:
    global _pending
    with _lock:
        if not _pending:
            return
        _pending = False
        _install_now(events, trees, cold)


def _install_now(events: str | None, trees: bool = False, cold: bool = False) -> None:
    global _tracer
    try:
        from cachetool.trace.sinks import EventsSink, LedgerSink
        from cachetool.trace.tracer import Tracer

        sink: LedgerSink | EventsSink
        sink = EventsSink(events, trees) if events else LedgerSink()
        tracer = Tracer(sink)
        # The determinism runner's cold run: every step computes, so what a step changes in its
        # function's objects shows; it writes where a plain run would, for the next run to load.
        tracer.recompute = bool(cold and events)
        if tracer.install():
            _tracer = tracer
            _register_fork_handler()
            tracer.start_run()
            from cachetool.trace.lease import hold_lease

            # Announce this writer to gc and verify on every host that shares the root.
            hold_lease(tracer.default_root)
        else:
            sink.close()
    except Exception as e:  # never raise into the user's code
        with contextlib.suppress(Exception):
            sys.stderr.write(f"cachetool: warning: tracing is off ({type(e).__name__}: {e})\n")


_fork_handler = False


def _register_fork_handler() -> None:
    # Handlers cannot be unregistered: one for the process, looking up the current tracer.
    global _fork_handler
    if not _fork_handler:
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork)
        atexit.register(_end_run)
        _fork_handler = True


def _end_run() -> None:
    """At exit: the run ended (a SIGKILL never gets here, and that is how a killed run shows)."""
    tracer = _tracer
    if tracer is not None:
        with contextlib.suppress(Exception):
            tracer.end_run()


def note_exit(exc: BaseException | None) -> None:
    """`cachetool run`: the script ended, normally (`exc` None) or by `exc`; the run's end record
    says how. Never raises."""
    tracer = _tracer
    if tracer is not None:
        with contextlib.suppress(Exception):
            tracer.note_exit(exc)


def _after_fork() -> None:
    tracer = _tracer
    if tracer is not None:
        tracer.after_fork()


def uninstall_tracing() -> None:
    """Remove the hooks (the original `datasets` functions come back) and close the ledger files."""
    global _tracer, _pending
    with _lock:
        if _pending:
            from cachetool.trace.importhook import remove_post_import_hooks

            remove_post_import_hooks("datasets")
            _pending = False
        if _tracer is not None:
            _tracer.uninstall()
            _tracer = None
            from cachetool.trace.lease import release_all

            release_all()


@contextlib.contextmanager
def tracing(events_file: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Record the `datasets` transform calls made inside the block::

        with cachetool.tracing():
            ds = load_dataset("csv", data_files="x.csv", split="train").map(f)

    Hooks installed before the block (by `cachetool run` or `install_tracing()`) stay after it.
    """
    already = _tracer is not None or _pending
    install_tracing(events_file)
    try:
        yield
    finally:
        if not already:
            uninstall_tracing()
