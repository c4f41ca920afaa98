"""A fingerprint as lineage shows it (`Step`): what made it, how often it ran and hit, its files."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from cachetool.formatting import human_size, iso_time
from cachetool.history.records.parts import CallSite, FunctionInfo, RandomFallback, SourceInfo
from cachetool.history.records.steps import StepRecord

__all__ = ["FileNow", "Step"]


@dataclass(frozen=True)
class FileNow:
    """A file a step wrote or reused, as it is on disk now."""

    path: str
    size: int | None  # None: gone

    @property
    def exists(self) -> bool:
        return self.size is not None


@dataclass(frozen=True)
class Step:
    """One fingerprint and what made it (its latest recorded origin), or a bare fingerprint that no
    record explains (`recorded` False)."""

    fingerprint: str
    recorded: bool
    parents: tuple[str, ...] = ()
    type: str | None = None
    operation: str | None = None
    transform: str | None = None
    function: FunctionInfo | None = None
    args: tuple[tuple[str, str], ...] = ()  # (name, short repr) of the small, telling arguments
    call_site: CallSite | None = None
    hits: int = 0
    misses: int = 0
    runs: int = 0
    cache: str | None = None  # of the latest record: hit | partial | miss | none
    files: tuple[FileNow, ...] = ()
    in_memory: bool = False
    fingerprint_given: bool = False
    random_fallback: RandomFallback | None = None
    source: SourceInfo | None = None
    root: str | None = None
    foreign: bool = False  # recorded in another root than the one asked about (`root` says which)
    internal: bool = False  # a call `datasets` made itself, shown because it wrote a file
    split: str | None = None
    last_used: float | None = None
    saved_to: tuple[str, ...] = ()  # save_to_disk folders that hold this fingerprint
    deleted: str | None = None  # "deleted by gc <time>: <reason>" when gc removed its files
    where: str | None = None  # "computed on node-3, loaded on node-7" when several hosts ran it
    record: StepRecord | None = field(default=None, compare=False, repr=False)

    @property
    def function_str(self) -> str:
        """`keep @ pipeline.py:14`: the function and the line the step was called at (two calls of
        one function look different); the line it is defined at where no call site is known."""
        fn = self.function
        if not fn:
            return ""
        name = fn.qualname or "?"
        site = self.call_site
        if site is not None and site.file and site.line is not None:
            return f"{name} @ {os.path.basename(site.file)}:{site.line}"
        if fn.file:
            return f"{name} @ {os.path.basename(fn.file)}:{fn.line}"
        return name

    @property
    def args_str(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.args)

    @property
    def file_str(self) -> str:
        """`3.1 MB`, `gone`, `no file (in memory)` or `no file`."""
        if not self.recorded:
            return ""
        if not self.files:
            return "no file (in memory)" if self.in_memory else "no file"
        if self.deleted and not any(f.exists for f in self.files):
            return "deleted"
        if all(f.exists for f in self.files):
            return human_size(sum(f.size or 0 for f in self.files))
        if not any(f.exists for f in self.files):
            return "gone"
        gone = sum(not f.exists for f in self.files)
        return f"{gone} of {len(self.files)} files gone"

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "recorded": self.recorded,
            "parents": list(self.parents),
            "type": self.type,
            "operation": self.operation,
            "transform": self.transform,
            "function": self.function.to_json() if self.function else None,
            "args": dict(self.args),
            "call_site": self.call_site.to_json() if self.call_site else None,
            "runs": self.runs,
            "hits": self.hits,
            "misses": self.misses,
            "cache": self.cache,
            "files": [{"path": f.path, "size": f.size, "exists": f.exists} for f in self.files],
            "in_memory": self.in_memory,
            "fingerprint_given": self.fingerprint_given,
            "random_fallback": self.random_fallback.to_json() if self.random_fallback else None,
            "source": self.source.to_json() if self.source else None,
            "root": self.root,
            "foreign": self.foreign,
            "internal": self.internal,
            "split": self.split,
            "used": iso_time(self.last_used),
            "saved_to": list(self.saved_to),
            "deleted": self.deleted,
            "where": self.where,
        }
