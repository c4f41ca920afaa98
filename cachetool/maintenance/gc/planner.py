"""Building a gc plan: scan, liveness snapshot, pins and the ledger's parents in; plain data out.
Nothing is removed here (`execute` does, checking everything again)."""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cachetool.cache import layout
from cachetool.cache.layout import WRITTEN_BY_DATASETS, Kind
from cachetool.cache.scan import CacheReport
from cachetool.errors import CachetoolError
from cachetool.maintenance.gc.eviction import EVICTABLE, EvictionPlanner
from cachetool.maintenance.gc.leftovers import LeftoverPlanner, TempScan, scan_temp_dir
from cachetool.maintenance.gc.options import NOTHING_SELECTED, GcOptions
from cachetool.maintenance.gc.plan import GcItem, GcPlan, KeptBecause, Refusal, Target, order_kept
from cachetool.maintenance.gc.rules import Rules
from cachetool.maintenance.shared import check_min_age, dead_writer_hint, shared_state


class _Builder(LeftoverPlanner, EvictionPlanner):
    """Every planning step over one set of inputs."""


def build_plan(
    report: CacheReport,
    rules: Rules,
    *,
    temp: TempScan | None = None,
    pins: Mapping[str, Any] | None = None,
    parents: Mapping[str, Iterable[str]] | None = None,
    root_refused: str | None = None,
) -> GcPlan:
    """Decide what a gc run removes, from a scan and the rules on a liveness snapshot (plus lock
    probes). Nothing is removed here: `execute()` runs the same rules again before each item."""
    options = rules.options
    fields = {f.name: getattr(rules, f.name) for f in dataclasses.fields(Rules)}
    b = _Builder(**fields, report=report, pins=set(pins or {}), parents=parents or {}, temp=temp)
    b.resolve_protections()
    if not rules.in_use.complete and options.all_users:
        # Without --all-users only our own files are touched, which other users' processes
        # (the ones we cannot inspect) rarely hold; with it, say that the check is partial.
        b.warnings.append("some processes could not be inspected; files they hold look unused")
    why_kept, evicting = _run_steps(b, report, options, parents or {}, root_refused)
    n, size, counts = b.kept(why_kept, evicting, named=bool(options.fingerprints) and not options.temp)
    return GcPlan(
        report.root,
        temp.path if temp else None,
        options,
        tuple(b.items),
        tuple(b.skipped),
        n,
        size,
        order_kept(counts, options),
        tuple(b.warnings),
        b.now,
    )


def _run_steps(
    b: _Builder,
    report: CacheReport,
    options: GcOptions,
    parents: Mapping[str, Iterable[str]],
    root_refused: str | None,
) -> tuple[dict[Path, KeptBecause], bool]:
    """Run the leftover and eviction steps the options ask for; returns why each unit that
    stays stays, and whether the run evicts."""
    from cachetool.cache.lookup import find_entry

    recorded = [*parents, *(x for v in parents.values() for x in v)]
    explicit = [find_entry(report, fp, recorded=recorded) for fp in options.fingerprints]
    leftover_kinds = layout.LEFTOVER_KINDS | {Kind.LOCK, Kind.DOWNLOAD, Kind.TF_CACHE}
    named_leftovers = {e.path for e in explicit if e.kind in leftover_kinds}
    explicit = [e for e in explicit if e.kind not in leftover_kinds]
    if root_refused is not None:
        # Not a datasets cache: only the temp dir is cleaned (eviction was refused earlier).
        b.warnings.append(f"not cleaning {report.root}: {root_refused}; pass --force-root if you mean it")
        b.temp_folders()
    elif options.temp:
        b.leftovers()
        b.temp_folders()
    elif named_leftovers:
        b.leftovers(only=named_leftovers)
    evicting = bool(explicit) or options.older_than is not None or options.max_size is not None
    evicting = evicting or bool(options.datasets)
    if not evicting:
        return {}, False
    for e in explicit:
        if e.kind not in EVICTABLE:
            b.skip(
                e, Refusal("not-evictable", f"a {e.kind.value} entry is not evicted (see cachetool verify)")
            )
        elif e.kind == Kind.SAVED and (e.unit or e.path) == b.root:
            b.skip(
                e, Refusal("cache-root", "is the cache root itself: gc never removes the folder it cleans")
            )
    # Names narrow the run even when none of them can be evicted: `[]` is "nothing in scope".
    named = [e for e in explicit if e.kind in EVICTABLE] if options.fingerprints else None
    return b.evictions(named), True


_LAYOUT_KINDS = WRITTEN_BY_DATASETS | {
    Kind.INCOMPLETE_PREPARE,
    Kind.INCOMPLETE_SAVE,
    Kind.DOWNLOAD,
    Kind.EXTRACTED,
    Kind.TF_CACHE,
}

#: Why gc will not clean a root without `--force-root`; "not-a-cache": whatever matches a
#: leftover name there is somebody's file.
_ROOT_REFUSALS = {
    "fs-root": "it is the file system root",
    "home": "it is or holds your home folder",
    "not-a-cache": "nothing in it looks like a datasets cache (no dataset folder, cache file or download)",
}


def root_refusal(report: CacheReport) -> str | None:
    """Why gc will not clean this root without `--force-root` (a key of `_ROOT_REFUSALS`): it is
    `/` or holds a home folder, or nothing in it looks like a `datasets` cache."""
    root = os.path.realpath(report.root)
    home = os.path.realpath(os.path.expanduser("~"))
    if root == "/":
        return "fs-root"
    if home != "/" and (root == home or home.startswith(root.rstrip("/") + "/")):
        return "home"
    if report.datasets or any(e.kind in _LAYOUT_KINDS for e in report.entries):
        return None
    if any(layout.VERSION_RE.match(p.name) for p in Path(report.root).glob("*/*/*") if p.is_dir()):
        return None  # builder folders (`<name>/<config>/<version>`) not prepared yet
    return "not-a-cache"


def _refuse_a_partly_read_ledger(root: Path, segments: Iterable[Path]) -> None:
    from cachetool.formatting import human_size
    from cachetool.history.ledger import MAX_SEGMENT_BYTES, read_partly

    cut = [p for p in segments if read_partly(p)]
    if cut:
        raise CachetoolError(
            f"the ledger of {root} could not be read whole ({cut[0]} holds more than the "
            f"{human_size(MAX_SEGMENT_BYTES)} read of a segment): gc evicts nothing, since what was "
            "not read may name the ancestors of a pinned entry; gc --temp still removes leftovers"
        )


def plan_gc(root: str | os.PathLike[str], options: GcOptions) -> GcPlan:
    """Scan `root` (and the temp dir with `--temp`), take a liveness snapshot, read pins and the
    ledger's parents, and build the plan. When `options` select nothing (no `temp`, nothing
    named, no limit) nothing is scanned: the plan is empty and its one warning says so. A root
    that is not an existing folder is a `CachetoolError` (exit 2), as for the command."""
    from cachetool.cache.dirs import existing_root

    root = existing_root(root)
    if not options.selects:
        return GcPlan(root, None, options, (), warnings=(NOTHING_SELECTED,), created_at=time.time())
    if options.quarantine:
        return plan_purge(root, options)
    from cachetool.cache.scan import scan_cache

    root_id = _folder_id(root)
    ledger = None
    if options.evicts:
        # Evicting needs the whole ledger: what was not read may name the recorded ancestors
        # of a pinned entry (or the last use of an entry), which gc would then choose.
        from cachetool.history.ledger import Ledger

        ledger = Ledger.load(Path(root).expanduser().resolve(), follow=False)
        _refuse_a_partly_read_ledger(root, ledger.segments)
    from cachetool.maintenance.liveness import scan_in_use

    report = scan_cache(root, usage=ledger.usage() if ledger is not None else None, liveness=scan_in_use)
    if _folder_id(report.root) != root_id:
        raise CachetoolError(
            f"the cache root {report.root} was replaced while it was scanned; nothing removed"
        )
    why = None if options.force_root or not report.entries else root_refusal(report)
    if why is not None and (options.evicts or why != "not-a-cache"):
        raise CachetoolError(
            f"refusing to clean {report.root}: {_ROOT_REFUSALS[why]}; pass --force-root if you mean it"
        )
    temp, temp_id = _scan_temp(options)
    shared = shared_state(report.root)
    check_min_age(report.root, shared, options.min_age, options.temp, options.other_hosts_idle)
    pins: dict[str, Any] = {}
    parents: dict[str, frozenset[str]] = {}
    if ledger is not None:  # only eviction asks what is pinned and what it descends from
        from cachetool.cache.pins import read_pins
        from cachetool.maintenance.gc.eviction import recorded_parents

        pins = read_pins(report.root)
        parents = recorded_parents(ledger) if pins or options.keep or options.fingerprints else {}
    plan = _build_live(
        report, options, temp, pins=pins, parents=parents, root_refused=_ROOT_REFUSALS[why] if why else None
    )
    modified = {e.path: e.modified for e in report.entries}
    young = {
        s.path: modified.get(s.path) for s in plan.skipped if s.code == "too-young" and s.scope == "root"
    }
    hint = dead_writer_hint(report.root, shared, young, options.min_age)
    return dataclasses.replace(
        plan, root_id=root_id, temp_id=temp_id, shared=shared, hints=(hint,) if hint else ()
    )


def plan_purge(root: Path, options: GcOptions) -> GcPlan:
    """The plan of `--quarantine`: what `verify --quarantine` moved aside into
    `<root>/.cachetool/quarantine/` (as `quarantined(root)` lists it, the log checked, not
    trusted), all of it or, with `older_than`, what was moved aside at least that long ago.
    Execute checks each again (not a symlink, not in use, yours) as for any item."""
    from cachetool.formatting import iso_time
    from cachetool.maintenance.verify.quarantine import quarantined

    root = root.resolve()  # as the quarantine's records name their paths
    now = time.time()
    items: list[GcItem] = []
    kept, kept_bytes = 0, 0
    for q in quarantined(root):
        if options.older_than is not None and now - q.time < options.older_than:
            kept, kept_bytes = kept + 1, kept_bytes + q.size
            continue
        try:
            st = os.lstat(q.path)
        except OSError:
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        items.append(
            GcItem(
                q.path,
                Kind.UNREADABLE,
                q.size,
                q.files,
                f"quarantined {iso_time(q.time)} from {q.original}: {q.problem}",
                (Target(q.path, is_dir, q.size, st.st_mtime),),
                action="purge",
            )
        )
    reasons = ((KeptBecause.QUARANTINED_RECENTLY, kept),) if kept else ()
    return GcPlan(
        root, None, options, tuple(items), (), kept, kept_bytes, reasons, (), now, root_id=_folder_id(root)
    )


def _scan_temp(options: GcOptions) -> tuple[TempScan | None, tuple[int, int] | None]:
    """The temp dir's scan and identity, with `--temp`."""
    from cachetool.cache.dirs import temp_dir

    if not options.temp:
        return None, None
    tmp = options.tmp_dir if options.tmp_dir is not None else temp_dir().path
    return scan_temp_dir(tmp), _folder_id(tmp)


def _build_live(report: CacheReport, options: GcOptions, temp: TempScan | None, **keywords: Any) -> GcPlan:
    """`build_plan` with this host's liveness, taken last: the snapshot should be younger than
    everything it judges."""
    kinds = (f.kind for f in temp.folders) if temp else ()
    rules = Rules.take(options, report.root, temp.path if temp else None, kinds)
    return build_plan(report, rules, temp=temp, **keywords)


def plan_temp_only(root: Path, options: GcOptions) -> GcPlan:
    """The plan of `--temp` when the default cache root does not exist yet (nothing cached): the
    temp dir alone; nothing is read or made at `root`."""
    temp, temp_id = _scan_temp(options)
    plan = _build_live(CacheReport(root, (), ()), options, temp)
    note = f"nothing cached yet ({root} does not exist): only the temp dir is cleaned"
    return dataclasses.replace(plan, temp_id=temp_id, warnings=(note, *plan.warnings))


def _folder_id(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
