"""The options of `cachetool gc`, declared once: `GcOptions`'s fields make the command's
arguments and options (`cachetool.cli.gc`), `gc_cache()`'s keywords and their docs, and it
validates itself, for the command as for Python."""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any

from cachetool.errors import CachetoolError

#: Default `--min-age`: younger leftovers may belong to a writer this host cannot see.
DEFAULT_MIN_AGE = 3600.0


def _option(
    help: str, *, keyword: str | None = None, cli_default: Any = None, parse: str | None = None
) -> Any:
    """A `GcOptions` field's one declaration for the command, `gc_cache` and the docs: its help,
    its keyword when not the field's name (`--dataset` is `datasets`), the command's default
    when it differs (`--min-age 1h`), and how a string value is read ("duration", "size")."""
    return {"help": help, "keyword": keyword, "cli_default": cli_default, "parse": parse}


@dataclass(frozen=True)
class GcOptions:
    """Every choice of a gc run, declared once: `cachetool gc`'s options and `gc_cache()`'s
    keywords are made from these fields. Durations are seconds (or `"30d"`), sizes bytes (or
    `"50GB"`); an invalid value raises `CachetoolError` (exit 2) here, for the command as for Python."""

    temp: bool = field(
        default=False,
        metadata=_option(
            "Remove leftovers of killed processes: `tmp*` files, `.incomplete` folders, interrupted "
            "saves and downloads, unheld locks of folders that are gone, and `hf_datasets-*` / `pymp-*` "
            "folders in the temp dir (nothing else there)."
        ),
    )
    tmp_dir: Path | None = field(
        default=None,
        metadata=_option(
            "The temp dir to clean with --temp. Default: the one datasets uses (TMPDIR, TEMP, TMP, "
            "else the system default)."
        ),
    )
    min_age: float = field(
        default=DEFAULT_MIN_AGE,
        metadata=_option(
            "Only touch what was modified at least this long ago (s, m, h, d, w). Processes on other "
            "hosts of a shared file system are invisible to gc: there, their leases and age are the "
            "guards (at least 10m for temp files no lease covers).",
            cli_default="1h",
            parse="duration",
        ),
    )
    all_users: bool = field(
        default=False, metadata=_option("Also remove files other users own (default: only yours).")
    )
    older_than: float | None = field(
        default=None,
        metadata=_option(
            "Evict entries not used in this long (e.g. 30d): last ledger record, else modified time. "
            "With --quarantine: purge what was moved aside at least this long ago.",
            parse="duration",
        ),
    )
    max_size: int | None = field(
        default=None,
        metadata=_option(
            "Evict least recently used entries until the cache is under this size (e.g. 50GB).",
            parse="size",
        ),
    )
    datasets: tuple[str, ...] = field(
        default=(),
        metadata=_option(
            "Only entries of this dataset (e.g. csv or csv/default-…); repeatable.", keyword="dataset"
        ),
    )
    #: The command's arguments: entries to evict, as `cachetool ls -q` prints them.
    fingerprints: tuple[str, ...] = field(
        default=(),
        metadata=_option(
            "Entries to evict: fingerprints (or prefixes) or paths, as `cachetool ls -q` prints them."
        ),
    )
    keep: tuple[str, ...] = field(
        default=(),
        metadata=_option("Never evict this fingerprint or its recorded ancestors (repeatable)."),
    )
    include_sources: bool = field(
        default=False,
        metadata=_option("Also evict source splits and saved datasets (kept by default)."),
    )
    force_root: bool = field(
        default=False,
        metadata=_option(
            "Clean the folder even if it is /, holds your home folder, or has no datasets "
            "layout (refused by default: there, leftover-looking names may be your own files)."
        ),
    )
    other_hosts_idle: bool = field(
        default=False,
        metadata=_option(
            "On a shared file system (NFS, Lustre, GPFS, CephFS, CIFS, FUSE), allow --min-age below "
            "10m for temp files no lease covers: you know no process on another host writes this cache "
            "outside `cachetool run` or `cachetool.tracing()`."
        ),
    )
    quarantine: bool = field(
        default=False,
        metadata=_option(
            "Purge the quarantine: delete what `verify --quarantine` moved aside into "
            ".cachetool/quarantine/ (with --older-than: moved aside at least that long ago). Nothing "
            "else is removed in that run."
        ),
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "tuple[str, ...]":
                if isinstance(value, str):
                    raise CachetoolError(f"{f.name} must be a sequence of names, not one string")
                value = tuple(value or ())
            elif isinstance(value, str) and f.metadata["parse"] is not None:
                value = _parse(value, f.metadata["parse"], f"--{option_keyword(f).replace('_', '-')}")
            elif f.name == "tmp_dir" and value is not None:
                value = Path(value)
            if f.metadata["parse"] is not None and value is not None:
                value = int(value) if f.name == "max_size" else float(value)
                if value < 0:
                    raise CachetoolError(
                        f"invalid --{f.name.replace('_', '-')} {value!r}: must not be negative"
                    )
            object.__setattr__(self, f.name, value)
        if self.quarantine and (
            self.temp or self.max_size is not None or self.datasets or self.fingerprints or self.keep
        ):
            raise CachetoolError(
                "--quarantine purges the quarantine and nothing else: run --temp or an eviction as a "
                "gc of its own (quarantine=True takes only older_than)"
            )
        if self.tmp_dir is not None and not self.temp:
            raise CachetoolError("--tmp-dir only makes sense with --temp (tmp_dir needs temp=True)")

    @classmethod
    def of(cls, **keywords: Any) -> GcOptions:
        """The options of `cachetool gc`'s keywords (`dataset=` for `datasets`)."""
        names = {option_keyword(f): f.name for f in fields(cls)}
        unknown = sorted(set(keywords) - set(names))
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
        return cls(**{names[k]: v for k, v in keywords.items()})

    def to_json(self) -> dict[str, Any]:
        """The options as `--json` shows them (the temp dir is the plan's `temp_dir`)."""
        skip = ("tmp_dir", "force_root")
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in skip}

    @property
    def evicts(self) -> bool:
        """True when the run evicts entries (not only leftovers)."""
        return not self.quarantine and bool(
            self.older_than is not None or self.max_size is not None or self.datasets or self.fingerprints
        )

    @property
    def selects(self) -> bool:
        """False when nothing is selected (no `--temp`, no entries named, no limit, no
        `--quarantine`): nothing to do."""
        return self.temp or self.evicts or self.quarantine


def option_keyword(f: Field[Any]) -> str:
    """The keyword (and, dashed, the `--flag`) of a `GcOptions` field."""
    return f.metadata["keyword"] or f.name


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _parse(value: str, how: str, option: str) -> float:
    from cachetool.cache.query import BYTE_UNITS, parse_duration, parse_quantity

    return (
        parse_duration(value, option)
        if how == "duration"
        else parse_quantity(value, BYTE_UNITS, option, value)
    )


#: What gc says when nothing was selected at all (exit 0; see docs/gc.md).
NOTHING_SELECTED = (
    "nothing to do: no entries named and none of --temp, --older-than, --max-size, --dataset, "
    "--quarantine given "
    "(an empty `cachetool ls -q` selection selects nothing)"
)
