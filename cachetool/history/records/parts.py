"""Parts of a record: call site, function, arguments, columns, files and sources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from cachetool.history.records.base import Part


@dataclass(init=False, repr=False, eq=False)
class CallSite(Part):
    """Where the user's code called the step: the first frame outside `datasets` and cachetool."""

    file: str | None = None
    line: int | None = None
    function: str | None = None


@dataclass(init=False, repr=False, eq=False)
class FunctionRef(Part):
    """A function of the user's code: its name, place and the hashes of its source and bytecode;
    for one `datasets` hashes by name, the digest of each plain value of its module it reads
    (`reads`: a constant edited there changes what it does, not its code)."""

    OMIT: ClassVar[tuple[str, ...]] = ("reads",)

    qualname: str | None = None
    file: str | None = None
    line: int | None = None
    source_hash: str | None = None
    code_hash: str | None = None
    reads: Mapping[str, str] = field(default_factory=dict)


@dataclass(init=False, repr=False, eq=False)
class FunctionInfo(FunctionRef):
    """The user's function of a step, with the helpers of the user's modules it reaches."""

    by_reference: bool = False
    deps: tuple[FunctionRef, ...] = ()
    error: str | None = None  # the function could not be described: written alone, or not at all

    def to_json(self) -> dict[str, Any]:
        if self.error is not None and self.qualname is None:
            return {"error": self.error}
        out = super().to_json()
        del out["error"]
        return out


@dataclass(init=False, repr=False, eq=False)
class ArgInfo(Part):
    """One hashed argument of a step: its `Hasher` digest, a short repr and its type name;
    `summary` (a bounded hash tree) for steps that computed, `tree` (a full one) in events files,
    and there `after`: its tree at the end of a step that changed it while it ran."""

    OMIT: ClassVar[tuple[str, ...]] = ("summary", "tree", "after")

    digest: str | None = None
    repr: str | None = None
    type: str | None = None
    summary: Mapping[str, Any] | None = None
    tree: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None


@dataclass(init=False, repr=False, eq=False)
class ColumnHead(Part):
    """A column of an in-memory source in an events file: its digest and the short reprs of its
    first values (a source built at run time is explained by the first value that differs)."""

    digest: str | None = None
    head: tuple[str, ...] = ()


@dataclass(init=False, repr=False, eq=False)
class RandomFallback(Part):
    """`datasets` could not hash `argument` (None: the transform itself) and used a random fingerprint;
    `predictable`: drawn from Python's global `random` (datasets < 2.17), so the same in every run
    after `random.seed(...)`."""

    OMIT: ClassVar[tuple[str, ...]] = ("predictable",)

    argument: str | None = None
    error: str | None = None
    error_type: str | None = None
    predictable: bool = False


@dataclass(init=False, repr=False, eq=False)
class FileRecord(Part):
    """A cache file a step produced or reused: `status` "written" or "reused"."""

    path: str
    size: int | None = None
    status: str | None = None


@dataclass(init=False, repr=False, eq=False)
class DataFile(Part):
    """A local data file of a builder at load time."""

    split: str | None
    path: str
    size: int | None = None
    mtime: float | None = None


@dataclass(init=False, repr=False, eq=False)
class SourceInfo(Part):
    """Where a chain starts (roots) or where a save went (saves). `kind` is "builder", "saved",
    "in-memory" or "file"; the other fields belong to one kind each (None otherwise) and are
    written only when set, a builder's always and only its own."""

    kind: str | None = None
    builder: str | None = None
    config: str | None = None
    relative_data_dir: str | None = None
    split: str | None = None
    path: str | None = None
    state_fingerprint: str | None = None
    constructor: str | None = None
    data_files: tuple[DataFile, ...] = ()
    #: The local files a generator (`from_generator`) was given by name in `gen_kwargs`, with
    #: their size and mtime: `datasets` hashes their names only, so an edited one leaves it stale.
    gen_files: tuple[DataFile, ...] = ()

    def to_json(self) -> dict[str, Any]:
        if self.kind != "builder":
            return {k: v for k, v in super().to_json().items() if k == "kind" or v not in (None, [])}
        out = {k: getattr(self, k) for k in ("kind", "builder", "config", "relative_data_dir", "split")}
        gen = {"gen_files": [x.to_json() for x in self.gen_files]} if self.gen_files else {}
        return out | {"data_files": [x.to_json() for x in self.data_files]} | gen


@dataclass(init=False, repr=False, eq=False)
class Resumed(Part):
    """A map that reused `rows` of its `of` rows from the `tmp*` files its killed run `run` left;
    `seconds`: the wall time the killed run(s) spent computing them (None in older records)."""

    OMIT: ClassVar[tuple[str, ...]] = ("seconds",)

    rows: int = 0
    of: int = 0
    run: str | None = None
    seconds: float | None = None

    @property
    def text(self) -> str:
        return f"resumed: {self.rows:,} of {self.of:,} rows reused from the killed run of {self.run}"


@dataclass(init=False, repr=False, eq=False)
class Rekeyed(Part):
    """A map whose result was the earlier result `source` (of the run `run`), written under the
    step's fingerprint once `batches` sampled batches (`rows` rows) computed again equalled it."""

    source: str | None = None
    run: str | None = None
    batches: int = 0
    rows: int = 0

    @property
    def text(self) -> str:
        return (
            f"re-keyed from {self.source}, proven on {self.batches} batches "
            f"({self.rows:,} rows computed again, equal)"
        )


@dataclass(init=False, repr=False, eq=False)
class Compute(Part):
    """What a step that computed its result cost: `wall` seconds, and `cpu` seconds of this
    process and of the worker processes it ran and reaped (`num_proc`)."""

    wall: float = 0.0
    cpu: float = 0.0
