"""What a check leaves when it is stopped (a timeout, Ctrl-C, SIGTERM) and how it is removed: tmp
files its runs wrote in the user's cache, the temp folders they made, the check's own folder."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from cachetool.errors import CachetoolError, ExitCode

__all__ = [
    "WORKDIR_PREFIX",
    "CheckInterrupted",
    "Leftovers",
    "Terminated",
    "cache_root",
    "terminate_as_interrupt",
]

#: The temp folder of a check: `cachetool-determinism-<pid>-<random>`; `gc --temp` removes it
#: once that process is gone.
WORKDIR_PREFIX = "cachetool-determinism-"


class CheckInterrupted(CachetoolError):
    """The check was interrupted (Ctrl-C) or terminated (SIGTERM): its runs were stopped and what
    they left was removed; the message says what."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, cause: BaseException, removed: str, workdir: Path) -> None:
        what = "terminated" if isinstance(cause, Terminated) else "interrupted"
        parts = [f"check-determinism {what}: stopped the running script"]
        if removed:
            parts.append(f"removed what its runs left: {removed}")
        parts.append(f"removed its temp folder {workdir}")
        super().__init__("; ".join(parts))
        self.cause = cause


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that cleanup runs as for Ctrl-C."""


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def cache_root(env: Mapping[str, str]) -> Path:
    from cachetool.cache.dirs import resolve_cache_root

    return resolve_cache_root(None, environ=env).path.expanduser()


class Leftovers:
    """What stopped runs leave: `tmp*` files in the user's cache, `hf_datasets-*` and `pymp-*`
    folders in the temp dir (a cold run writes a step the cache already holds to an `hf_datasets-*`
    folder). Only what the check
    made is removed: cache files written since it started, temp folders that were not there
    before it; each through gc's own checks (not open, not mapped, not owned by a live process)."""

    def __init__(self, cache_root: Path | None, env: Mapping[str, str]) -> None:
        from cachetool.cache.dirs import temp_dir

        self.cache_root = cache_root
        self.temp = temp_dir(env).path
        self.before = self._temp_folders()

    def _temp_folders(self) -> set[str]:
        from cachetool.cache.layout import temp_folder_kind

        try:
            return {n for n in os.listdir(self.temp) if temp_folder_kind(n) in ("hf_datasets", "pymp")}
        except OSError:
            return set()

    def remove(self, since: float, workdir: Path) -> str:
        """Remove them; returns what went, in words ("" when nothing)."""
        try:
            from dataclasses import replace

            from cachetool.cache.layout import Kind
            from cachetool.maintenance.gc.execute import execute
            from cachetool.maintenance.gc.options import GcOptions
            from cachetool.maintenance.gc.planner import plan_gc

            root = self.cache_root if self.cache_root is not None and self.cache_root.is_dir() else workdir
            plan = plan_gc(root, GcOptions(temp=True, min_age=0.0, tmp_dir=self.temp))
            new_temp = self._temp_folders() - self.before
            mine = tuple(
                i
                for i in plan.items
                if (
                    i.scope == "root"
                    and root != workdir
                    and i.kind == Kind.TEMP
                    and all(t.mtime is not None and t.mtime >= since - 1 for t in i.targets)
                )
                or (i.scope == "temp" and i.path.name in new_temp)
            )
            if not mine:
                return ""
            result = execute(replace(plan, items=mine), log=False)
        except Exception:  # cleanup must never hide the report; gc --temp removes them later
            return ""
        files = sum(1 for o in result.removed if o.item.scope == "root")
        folders = sum(1 for o in result.removed if o.item.scope == "temp")
        words = []
        if files:
            words.append(f"{files} tmp file(s) in {self.cache_root}")
        if folders:
            words.append(f"{folders} temp folder(s) in {self.temp}")
        return " and ".join(words)
