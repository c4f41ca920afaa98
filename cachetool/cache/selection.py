"""What `cachetool ls` shows, as data (`read_listing`: the scan, then `--filter`, `--sort`,
`--limit`), and the `--filter` and `--sort` expressions over entries, with `hf cache ls` semantics.

Filters: `KEY OP VALUE` with OP one of `= != > < >= <=`.
- `size>100MB`: bytes (decimal units k/KB, M/MB, G/GB, T/TB, as `hf cache`).
- `rows<1000`, `files>1`: counts.
- `used>7d`, `modified>30d`: *age*, i.e. now minus the time; `used>7d` means "not used in the
  last 7 days" (units s, m, h, d, w, mo, y).
  `accessed` is the same as `used` (the key `hf cache` uses).
- `pinned=yes` / `pinned=no`: entries pinned with `cachetool pin` (or not).
- `kind=temp`, `dataset=csv`, `split=train`, `content=indices`: text; `=` and `!=` only;
  `dataset=` matches the dataset name or its first part (`csv` matches `csv/default-…`), `kind=`
  accepts several kinds separated by commas.
An entry without a value for the key (rows of a lock file) never matches a comparison.
"""

from __future__ import annotations

import operator
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheReport, Entry, Liveness, RecordedUse
from cachetool.errors import BadExpression, CachetoolError

if TYPE_CHECKING:
    from cachetool.cache.shard import Shard

_FILTER_RE = re.compile(r"(?P<key>[a-zA-Z_]+)\s*(?P<op>==|!=|>=|<=|>|<|=)\s*(?P<value>.+)")
_NUMBER_UNIT_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)")

#: Decimal units (k/KB ... P/PB, as `hf cache`) and binary ones (KiB ... TiB), lower case.
BYTE_UNITS = (
    {"": 1, "b": 1}
    | {p + b: 10 ** (3 * i) for i, p in enumerate("kmgtp", 1) for b in ("", "b")}
    | {p + "ib": 2 ** (10 * i) for i, p in enumerate("kmgt", 1)}
)
TIME_UNITS = {
    "": 1,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 7 * 86400,
    "mo": 30 * 86400,
    "y": 365 * 86400,
}

NUMERIC_KEYS = {"size": BYTE_UNITS, "rows": None, "files": None}
AGE_KEYS = {"used", "modified"}
TEXT_KEYS = {"kind", "dataset", "split", "content", "fingerprint"}
#: Other names for a key: `accessed` is what `hf cache ls` calls last use.
KEY_SYNONYMS = {"accessed": "used"}
FILTER_KEYS = sorted({*NUMERIC_KEYS, *AGE_KEYS, *TEXT_KEYS, *KEY_SYNONYMS, "pinned"})
SORT_KEYS = ("size", "modified", "used", "accessed", "rows", "name", "files", "kind")
_YES = {"yes", "true", "1", "y"}
_NO = {"no", "false", "0", "n"}
# Newest, biggest, most first unless told otherwise; names ascending (as `hf cache ls`).
_DEFAULT_DESC = {"size", "modified", "used", "rows", "files"}
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
    ">=": operator.ge,
    "<=": operator.le,
}
#: The value of an entry each numeric, age and sort key compares (None: it has none).
_VALUES: dict[str, Callable[[Entry], Any]] = {
    "size": operator.attrgetter("size"),
    "rows": operator.attrgetter("rows"),
    "files": lambda e: len(e.files),
    "modified": operator.attrgetter("modified"),
    "used": operator.attrgetter("used"),
    "kind": lambda e: e.kind.value,
    "name": lambda e: (e.dataset or "~", e.split or "", e.id),
}

EntryTest = Callable[[Entry, float], bool]


def parse_quantity(value: str, units: dict[str, int] | None, option: str, expr: str) -> float:
    """`100MB` with BYTE_UNITS, `7d` with TIME_UNITS, a bare count with None; a bad value is a
    `BadExpression` naming `option` and quoting `expr` (a usage error, exit 2)."""
    m = _NUMBER_UNIT_RE.fullmatch(value.strip())
    if m is None:
        negative = _NUMBER_UNIT_RE.fullmatch(value.strip().removeprefix("-")) is not None
        raise BadExpression(option, expr, f"'{value}' is {'negative' if negative else 'not a number'}")
    number, unit = float(m.group(1)), m.group(2).lower()
    if units is None:
        if unit:
            raise BadExpression(option, expr, f"'{value}' takes no unit")
        return number
    if unit not in units:
        raise BadExpression(
            option, expr, f"unknown unit '{unit}' (use one of {', '.join(u for u in units if u)})"
        )
    return number * units[unit]


def parse_duration(value: str, option: str, expr: str | None = None) -> float:
    """Seconds from `30d`, `12h`, `90m`; a bare number other than 0 is refused with a hint, since
    `--older-than 30` reads as days to some and as seconds to others (a usage error, exit 2)."""
    m = _NUMBER_UNIT_RE.fullmatch(value.strip())
    if m is None and not value.strip().startswith("-"):  # a negative one is refused as such
        said = expr if expr is not None else value
        raise BadExpression(
            option, said, f"'{value}' is not a duration: give a number and a unit, e.g. 7d, 12h, 30m"
        )
    if m is not None and not m.group(2) and float(m.group(1)) != 0:
        n = m.group(1)
        raise BadExpression(
            option,
            expr if expr is not None else value,
            f"'{value}' needs a unit: {n}d (days)? {n}h (hours)? {n}s (seconds)? "
            f"(units: {', '.join(u for u in TIME_UNITS if u)})",
        )
    return parse_quantity(value, TIME_UNITS, option, expr if expr is not None else value)


def compile_filter(expr: str, pinned: frozenset[str] = frozenset()) -> EntryTest:
    """Turn one `--filter` expression into a test of (entry, now); `pinned` holds the pinned
    fingerprints, for `pinned=yes`."""
    m = _FILTER_RE.fullmatch(expr.strip())
    if m is None:
        raise BadExpression("--filter", expr, "expected KEY OP VALUE, e.g. 'size>100MB' or 'kind=temp'")
    key, op, value = m.group("key").lower(), m.group("op"), m.group("value").strip()
    key = KEY_SYNONYMS.get(key, key)
    if key == "pinned":
        if op not in ("=", "==", "!=") or value.lower() not in _YES | _NO:
            raise BadExpression("--filter", expr, "use pinned=yes or pinned=no")
        want = (value.lower() in _YES) != (op == "!=")
        return lambda e, now: e.pinned_in(pinned) == want
    if key in NUMERIC_KEYS or key in AGE_KEYS:
        age = key in AGE_KEYS  # compared as now minus the time
        # an age needs a unit, as --older-than does: `used>30` reads as days to some, seconds to others
        threshold = (
            parse_duration(value, "--filter", expr)
            if age
            else parse_quantity(value, NUMERIC_KEYS[key], "--filter", expr)
        )
        compare, value_of = _OPS[op], _VALUES[key]

        def test(e: Entry, now: float) -> bool:
            v = value_of(e)
            return v is not None and compare(now - v if age else v, threshold)

        return test
    if key in TEXT_KEYS:
        if op not in ("=", "==", "!="):
            raise BadExpression("--filter", expr, f"'{key}' takes only = or !=")
        wanted = {v.strip().lower() for v in value.split(",") if v.strip()}
        if key == "kind":
            known = {k.value for k in Kind} | {"shard", "leftover"}
            bad = sorted(wanted - known)
            if bad:
                raise BadExpression(
                    "--filter", expr, f"unknown kind '{bad[0]}' (kinds: {', '.join(k.value for k in Kind)})"
                )
        negate = op == "!="

        def text_test(e: Entry, now: float) -> bool:
            return _text_match(e, key, wanted) != negate

        return text_test
    raise BadExpression("--filter", expr, f"unknown key '{key}' (keys: {', '.join(FILTER_KEYS)})")


def _text_match(e: Entry, key: str, wanted: set[str]) -> bool:
    if key == "kind":
        kinds = {e.kind.value}
        if e.kind.value in ("temp", "incomplete-prepare", "incomplete-save"):
            kinds.add("leftover")
        if e.kind == Kind.SHARDS:
            kinds.add("shard")
        return bool(kinds & wanted)
    if key == "dataset":
        name = (e.dataset or "").lower()
        return name in wanted or name.split("/")[0] in wanted
    if key == "fingerprint":
        fps = [fp.lower() for fp in (e.fingerprint, *e.aliases) if fp]
        return any(fp.startswith(w) for fp in fps for w in wanted)
    attr = {"split": e.split, "content": e.content}[key]
    return (attr or "").lower() in wanted


def apply_filters(
    entries: Sequence[Entry],
    exprs: Sequence[str],
    now: float | None = None,
    pinned: frozenset[str] = frozenset(),
) -> list[Entry]:
    """Entries passing every filter (filters combine with AND)."""
    tests = [compile_filter(x, pinned) for x in exprs]
    if not tests:
        return list(entries)
    t = time.time() if now is None else now
    return [e for e in entries if all(test(e, t) for test in tests)]


def sort_entries(entries: Sequence[Entry], expr: str | None) -> list[Entry]:
    """Sort by `key[:asc|:desc]`; entries lacking the value go last."""
    if not expr:
        return list(entries)
    key, _, order = expr.strip().lower().partition(":")
    key = KEY_SYNONYMS.get(key, key)
    if key not in SORT_KEYS:
        raise BadExpression("--sort", expr, f"unknown key '{key}' (keys: {', '.join(SORT_KEYS)})")
    if order not in ("", "asc", "desc"):
        raise BadExpression("--sort", expr, "order must be 'asc' or 'desc'")
    desc = order == "desc" or (order == "" and key in _DEFAULT_DESC)

    value = _VALUES[key]
    present = [e for e in entries if value(e) is not None]
    missing = [e for e in entries if value(e) is None]
    return sorted(present, key=value, reverse=desc) + missing


@dataclass(frozen=True)
class Listing:
    """The scan of a folder and the entries the filters kept, in the sort order, cut to the limit."""

    report: CacheReport
    entries: list[Entry]
    #: Fingerprints pinned in this root (`cachetool pin`).
    pinned: frozenset[str] = frozenset()
    #: A damaged pins file, named (the listing goes on without pins).
    warnings: tuple[str, ...] = field(default=(), compare=False)


def read_listing(
    path: str | os.PathLike[str],
    *,
    filter: Sequence[str] = (),  # the name of the `--filter` option
    sort: str | None = None,
    limit: int | None = None,
    usage: Mapping[str, RecordedUse] | None = None,
    liveness: Callable[..., Liveness] | None = None,
    progress: Callable[[int], None] | None = None,
    shard: Shard | tuple[int, int] | str | None = None,
) -> Listing:
    """List a cache root, a `save_to_disk` folder or any folder of Arrow files with what the
    caller knows of it (`usage`, `liveness`: what `scan_cache` takes): `filter` holds `--filter`
    expressions (all must match), `sort` a `--sort` expression, `limit` the most entries kept;
    bad ones raise `BadExpression` before the folder is read. `shard` (`"i/n"` or `(i, n)`) keeps
    the share of shard i of n (`cachetool.cache.shard`) in the report too. The report keeps every
    entry (of the shard) (`listing.report.entries`); `listing.entries` are the ones selected."""
    from cachetool.cache.scan import scan_cache
    from cachetool.cache.shard import parse_shard, shard_report

    check_query(filter, sort, limit)
    chosen = parse_shard(shard)
    report = shard_report(scan_cache(Path(path), usage=usage, liveness=liveness, progress=progress), chosen)
    pinned, warnings = _pinned(report.root)
    entries = sort_entries(apply_filters(report.entries, list(filter), pinned=pinned), sort)
    if limit is not None:
        entries = entries[:limit]
    return Listing(report, entries, pinned, warnings)


def check_query(filter: Sequence[str], sort: str | None, limit: int | None) -> None:
    """Raise `BadExpression` for a bad `--filter` or `--sort` expression, before any scan."""
    for expr in filter:
        compile_filter(expr)
    sort_entries([], sort)
    if limit is not None and limit < 0:
        raise CachetoolError(f"--limit must be 0 or more, not {limit}")


def _pinned(root: Path) -> tuple[frozenset[str], tuple[str, ...]]:
    """The pinned fingerprints of `root` (kept by the root that holds it: `enclosing_root`); a
    damaged pins file is a warning (listing goes on)."""
    from cachetool.cache.locations import enclosing_root
    from cachetool.cache.pins import read_pins

    try:
        return frozenset(read_pins(enclosing_root(root))), ()
    except CachetoolError as e:
        return frozenset(), (e.message,)
