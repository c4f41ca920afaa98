"""The traced calls in progress: per thread, a stack of frames (a call `datasets` makes inside
another is internal), call sites, which output files existed before, and the hash watch inside
`update_fingerprint` (each top-level digest, the exception before a random fallback).
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cachetool.history.records.base import LedgerRecord
from cachetool.history.records.parts import CallSite
from cachetool.history.records.steps import StepRecord

_WHERE: dict[Any, int] = {}  # code object -> 0 user code, 1 datasets, 2 cachetool
_SITES: dict[tuple[Any, int], CallSite] = {}  # (code object, line) -> its call site
#: The arguments of a transform that name its output files, of the script's own choosing.
FILE_NAME_ARGS = tuple(f"{p}cache_file_name" for p in ("", "indices_", "train_indices_", "test_indices_"))


@dataclass(slots=True, eq=False)  # compared by identity: two hashes may see the same values
class HashEvent:
    """One `update_fingerprint` call: what `Hasher.hash` saw while it ran (each top-level digest,
    the error swallowed before a random fallback), then its parent fingerprint, transform,
    arguments and result."""

    digests: list[str] = field(default_factory=list)
    depth: int = 0
    error: str | None = None
    error_type: str | None = None
    error_at: int | None = None
    random: bool = False
    predictable: bool = False  # the random fallback came from Python's global `random`
    parent: Any = None
    transform: Any = None
    args: Any = None
    result: Any = None
    seq: int = 0
    start: float = 0.0  # set for hashes outside any traced call; others use their call's start
    call_site: CallSite | None = None
    #: Hash trees of the arguments, built when datasets hashed them (determinism runs only).
    trees: dict[str, Any] | None = None


@dataclass(slots=True, eq=False)
class Frame:
    """One hooked call in progress: what it was given, where it was called from, the hashes made
    directly inside it and the records of the calls nested in it."""

    op: str
    kind: str
    original: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    call_site: CallSite | None
    entry: str | None
    internal: bool
    seq: int
    parents: list[Any]
    parent_fps: list[Any] = field(init=False)
    start: float = field(init=False, default_factory=time.time)
    t0: float = field(init=False, default_factory=time.perf_counter)
    duration: float = 0.0
    hashes: list[HashEvent] = field(default_factory=list)
    started: bool = False  # a step-start record was written for this call
    resumed: Any = None  # the `Resumed` part of a map that reused its killed attempt's rows
    rekeyed: Any = None  # the `Rekeyed` part of a map given an equivalent earlier result
    #: The output files the script named (`FILE_NAME_ARGS`, absolute), as it gave them.
    named: dict[str, str] = field(default_factory=dict)
    cpu0: float | None = None  # a call the user made: CPU seconds used before it
    children: list[StepRecord] = field(default_factory=list)
    pending: list[LedgerRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.parent_fps = [getattr(d, "_fingerprint", None) for d in self.parents]


class CallState(threading.local):
    """Per thread: the stack of traced calls, the hash watch, the output snapshot."""

    def __init__(self) -> None:
        self.stack: list[Frame] = []
        self.watch: HashEvent | None = None  # the `update_fingerprint` call running
        #: Output path -> (inode, size) before the call wrote (size -1: not known), None: absent.
        self.snapshot: dict[str, tuple[int, int] | None] = {}
        #: The step leases the running call took (`cachetool.trace.once`), given back when it ends.
        self.once: list[Any] = []
        #: The cache files `datasets` set out to write in this process during the running call
        #: (the files its map or select computes): any other file that appeared was loaded.
        self.writes: set[str] = set()


class Calls:
    """The traced calls in progress (per thread) and where each was called from."""

    def __init__(self, seq: Any) -> None:
        self.local = CallState()
        self.seq = seq
        # Per code object, shared by every tracer of the process (tracing() may install twice).
        self._where = _WHERE
        self.datasets_prefix = ""
        self._cachetool_prefix = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

    def call_site(self, f: Any) -> tuple[bool, CallSite | None, str | None]:
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
                w = 1 if fn.startswith(self.datasets_prefix) else 0
                if not w and fn.startswith(self._cachetool_prefix):
                    w = 2
                where[code] = w
            if w == 2:
                f = f.f_back
                continue
            if caller_in_datasets is None:
                caller_in_datasets = w == 1
            if w == 0:
                line = f.f_lineno
                site = _SITES.get((code, line))
                if site is None:  # one per place: a loop's call site is read again each time
                    site = _SITES[code, line] = CallSite(code.co_filename, line, code.co_name)
                return bool(caller_in_datasets), site, entry
            entry = code.co_name
            f = f.f_back
        return bool(caller_in_datasets), None, entry

    def enter(
        self, op: str, kind: str, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any], caller: Any
    ) -> Frame:
        """A new frame for a hooked call made from the Python frame `caller` (or one below it)."""
        stack = self.local.stack
        caller_in_datasets, call_site, entry = self.call_site(caller)
        seq = next(self.seq)
        if kind == "concat":
            parents = list(args[0] if args else kwargs.get("dsets") or [])
        elif kind in ("transform", "inplace", "save"):
            parents = [args[0]] if args else [kwargs.get("self")]
        else:
            parents = []
        for key in FILE_NAME_ARGS:
            value = kwargs.get(key)
            if isinstance(value, str):
                self.snapshot(value)
        internal = bool(stack) and caller_in_datasets
        frame = Frame(op, kind, original, args, kwargs, call_site, entry, internal, seq, parents)
        if not stack:
            frame.cpu0 = cpu_seconds()
        stack.append(frame)
        return frame

    def leave(self, frame: Frame) -> None:
        """Take `frame` off its thread's stack; its duration is known."""
        frame.duration = time.perf_counter() - frame.t0
        stack = self.local.stack
        if stack and stack[-1] is frame:
            stack.pop()
        elif frame in stack:
            stack.remove(frame)

    def snapshot(self, path: str) -> None:
        """Remember which outputs of a call exist before it writes: `cache-<fp>.arrow` and its
        num_proc shards `cache-<fp>_00000_of_00002.arrow` (by inode, so a rewrite shows)."""
        snap = self.local.snapshot
        path = abs_path(path)
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
        with contextlib.suppress(OSError), os.scandir(folder) as it:
            for de in it:
                if de.name != base and de.name.startswith(stem) and de.name.endswith(ext):
                    snap.setdefault(de.path, (de.inode(), -1))  # (the inode is in the entry)


def wrap_hash(original: Callable[..., str], local: CallState) -> Callable[..., str]:
    """`Hasher.hash`, noting its digest (or its error) in the watch of the call it runs in."""

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


def wrap_random(original: Callable[..., str], local: CallState) -> Callable[..., str]:
    """`generate_random_fingerprint`, noting in the watch of the call it runs in that it ran, and
    whether it drew from Python's global `random` (datasets < 2.17), which `random.seed` fixes."""

    @functools.wraps(original)
    def generate_random_fingerprint(*args: Any, **kwargs: Any) -> str:
        w = local.watch
        if w is None:
            return original(*args, **kwargs)
        w.random = True
        state = random.getstate()
        fp = original(*args, **kwargs)
        w.predictable = random.getstate() != state
        return fp

    return generate_random_fingerprint


def cpu_seconds() -> float:
    """CPU seconds this process and its reaped children have used: a `num_proc` map's pool
    workers are reaped before the map returns, so the difference over a call counts them."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime  # microseconds, not ticks


def named_files(kwargs: dict[str, Any]) -> dict[str, str]:
    """The output files a call's keyword arguments name (`FILE_NAME_ARGS`), absolute."""
    return {
        name: abs_path(os.fspath(path))
        for name in FILE_NAME_ARGS
        if isinstance(path := kwargs.get(name), (str, os.PathLike))
    }


def abs_path(path: str) -> str:
    """`path` made absolute and normal."""
    if path.startswith("/") and "/." not in path and "//" not in path:
        return path  # already absolute and normal: the common case, kept cheap
    return os.path.abspath(os.path.expanduser(path))
