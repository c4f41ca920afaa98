"""`verify`: prove every cache file is whole and what it claims to be. `verify_cache(root)` (its
options are `VerifyOptions`) turns a scan into typed findings (`findings`), adds a full read with
`deep=True` (`deep`), and moves what has errors aside with `quarantine=True` (`quarantine`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cachetool.cache.layout import MOVABLE_KINDS
from cachetool.cache.lookup import find_entry
from cachetool.cache.model import CacheReport
from cachetool.cache.scan import scan_cache
from cachetool.cache.shard import Shard, parse_shard
from cachetool.errors import CachetoolError, option
from cachetool.history.ledger import Ledger
from cachetool.history.records.steps import StepStartRecord
from cachetool.maintenance import keyword_signature, options_of
from cachetool.maintenance.liveness import scan_in_use
from cachetool.maintenance.verify.deep import deep_pass
from cachetool.maintenance.verify.findings import (
    Checker,
    Finding,
    Severity,
    VerifyReport,
    check_indices,
)
from cachetool.maintenance.verify.quarantine import QuarantinePlan, plan_quarantine, restore

_ORDER = {s: i for i, s in enumerate(Severity)}


@dataclass(frozen=True)
class VerifyOptions:
    """Every choice of a verify run; mirrors `cachetool verify`'s options one to one. Invalid
    values raise `CachetoolError` (exit 2) here, before anything is read, so `verify_cache`
    refuses exactly what the command refuses."""

    fingerprints: Sequence[str] = option(
        (),
        "Check only these entries (fingerprints, unique prefixes or paths).",
        argument=True,
        show_default=False,
    )
    deep: bool = option(
        False,
        "Also read and validate every buffer (offsets, UTF-8, nulls), and compare each file's "
        "bytes with its checksum (xxh3) where --record stored one.",
    )
    record: bool = option(
        False,
        "With --deep: store the checksums, so a later `verify --deep` reports files whose bytes changed.",
    )
    stale: bool = option(
        False,
        "Also report entries computed by code that changed since: functions from your own "
        "modules, which datasets hashes by name (needs runs recorded by `cachetool run`).",
    )
    quarantine: bool = option(
        False,
        "Move files with errors into <root>/.cachetool/quarantine/ (never deletes; logged; asks "
        "first unless --yes).",
    )
    dry_run: bool = option(
        False, "With --quarantine: show what would move, and move nothing.", "--dry-run", "-n"
    )
    restore: bool = option(False, "Put quarantined files back, then verify.")
    strict: bool = option(False, "Exit 1 on warnings too.")
    jobs: int | None = option(None, "Threads for --deep (default: one per core).", "--jobs", "-j")
    #: `--quarantine --list`: list what the quarantine holds (`quarantined(root)`), check nothing.
    list_quarantine: bool = option(
        False,
        "With --quarantine: list what the quarantine holds (where each came from, its size "
        "and problem) and check nothing.",
        "--list",
    )
    shard: Shard | None = option(
        None,
        "Check only shard I of N (from 0): an even, stable share of the entries by fingerprint hex "
        "prefix, for N jobs on one or many hosts; join their --json with `cachetool merge`.",
        type=str | None,
        accepts="str | tuple[int, int] | Shard | None",
        metavar="I/N",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "shard", parse_shard(self.shard))
        if isinstance(self.fingerprints, str):
            raise CachetoolError("fingerprints must be a sequence of names, not one string")
        object.__setattr__(self, "fingerprints", tuple(self.fingerprints))
        for flag, needs, why in (
            ("record", "deep", "checksums come from reading every byte"),
            ("dry_run", "quarantine", "verify alone moves nothing"),
        ):
            if getattr(self, flag) and not getattr(self, needs):
                raise CachetoolError(
                    f"--{flag.replace('_', '-')} needs --{needs} ({flag}=True needs {needs}=True): {why}"
                )
        if self.list_quarantine and not self.quarantine:
            raise CachetoolError("--list needs --quarantine (it lists what the quarantine holds)")
        if self.jobs is not None and self.jobs < 1:
            raise CachetoolError(f"invalid --jobs {self.jobs!r}: must be at least 1 (jobs=None: every core)")


def verify_cache(
    root: str | os.PathLike[str],
    fingerprints: Sequence[str] = (),
    *,
    progress: Callable[[int, int], None] | None = None,
    ledger: Ledger | None = None,
    confirm: Callable[[QuarantinePlan], bool] | None = None,
    **options: Any,
) -> VerifyReport:
    """Check every entry of `root` (or the entries `fingerprints` name) and return the findings;
    the other keywords are the fields of `VerifyOptions`, which refuses (`CachetoolError`, usage)
    what the command refuses before anything is read. `progress(done, total)` follows the scan
    and the deep pass; `confirm(plan)`, when given, is asked before `quarantine` moves anything."""
    chosen = options_of(VerifyOptions, ("list_quarantine",), fingerprints=fingerprints, **options)
    return run_verify(root, chosen, progress=progress, ledger=ledger, confirm=confirm)


verify_cache.__signature__ = keyword_signature(  # type: ignore[attr-defined]
    verify_cache, VerifyOptions, skip=("list_quarantine",)
)


def run_verify(
    root: str | os.PathLike[str],
    options: VerifyOptions,
    *,
    progress: Callable[[int, int], None] | None = None,
    ledger: Ledger | None = None,
    confirm: Callable[[QuarantinePlan], bool] | None = None,
) -> VerifyReport:
    """`verify_cache` with its options as one value (what `cachetool verify` calls)."""
    notes: list[str] = []
    restored = restore(root, warn=notes.append) if options.restore else []
    report, scanned = _check(root, options, progress, ledger)
    report = replace(report, restored=tuple(restored), restore_notes=tuple(notes), strict=options.strict)
    if options.stale:
        report = _with_stale_findings(report, scanned, options.shard)
    if not options.quarantine:
        return report
    plan = plan_quarantine(report)
    if options.dry_run:
        return plan.dry_run()
    if plan.units and confirm is not None and not confirm(plan):
        return plan.report
    return plan.execute()


def _check(
    root: str | os.PathLike[str],
    options: VerifyOptions,
    progress: Callable[[int, int], None] | None,
    ledger: Ledger | None,
) -> tuple[VerifyReport, CacheReport]:
    """The findings about `root` (with every entry of its scan, the chosen ones checked)."""
    if ledger is None:  # a command that has loaded the ledger passes it
        ledger = Ledger.load(Path(root).expanduser().resolve(), follow=False)
    # Without `deep` every header is read again; with it the deep pass reads every byte anyway,
    # so the listing may take what the read index remembers (keyed by size, mtime and inode).
    usage = ledger.usage()  # once: the listing and the indices check both need it
    # One pass over /proc at most, taken when the listing or a check first needs it, for both.
    liveness = functools.cache(scan_in_use)
    report = scan_cache(
        root,
        use_index=options.deep,
        usage=usage,
        liveness=liveness,
        progress=(lambda n: progress(n, 0)) if progress is not None else None,
    )
    entries = list(report.entries)
    if options.fingerprints:
        chosen = {id(find_entry(report, fp, ledger)) for fp in options.fingerprints}
        entries = [e for e in entries if id(e) in chosen]
    shard = options.shard
    if shard is not None:
        entries = [e for e in entries if shard.holds_entry(e, report.root)]
    checker = Checker(report, liveness, functools.partial(killed_saves, ledger))
    for e in entries:
        checker.entry(e)
    check_indices(checker, entries, {fp: u.parent for fp, u in usage.items()}, ledger)
    if not options.fingerprints:
        _ledger_findings(checker, ledger, shard)
    bytes_checked = recorded = 0
    if options.deep:
        bytes_checked, recorded = deep_pass(
            checker, report, entries, record=options.record, jobs=options.jobs, progress=progress
        )
    findings = sorted(checker.findings, key=lambda f: (_ORDER[f.severity], os.fsdecode(f.path)))
    files_checked = sum(len(e.files) for e in entries)
    verified = VerifyReport(
        report.root,
        tuple(findings),
        len(entries),
        files_checked,
        bytes_checked,
        options.deep,
        recorded,
        shard=shard,
    )
    return verified, report


def killed_saves(ledger: Ledger) -> dict[Path, StepStartRecord]:
    """The folders that traced `save_to_disk` calls were writing when their process died, proven
    dead on this host by its pid and start time (`runs.run_state`). A save's start is in its
    run's ledger, not the folder's: every known root's ledger is read."""
    from cachetool.history.runs import open_starts, run_state

    records = Ledger.load(ledger.root, all_roots=True).records
    return {
        Path(os.path.realpath(s.paths[0])): s
        for s in open_starts(records)
        if s.operation == "save_to_disk" and s.paths and run_state(s) == "killed"
    }


def _ledger_findings(checker: Checker, ledger: Ledger, shard: Shard | None) -> None:
    """Records whose files are gone: information (a user removed them), not corruption. What gc
    removed after the record was written, and logged in the ledger, is history and says nothing.
    Under a shard: those of the fingerprints it holds."""
    removed: dict[str, float] = {}  # path gc removed (a file or a folder) -> when, the latest
    for gc in ledger.gc_records():
        for p in gc.paths:
            removed[p] = max(removed.get(p, gc.time), gc.time)

    def by_gc(path: str, written: float) -> bool:
        return any(removed.get(os.fspath(p), 0.0) >= written for p in (Path(path), *Path(path).parents))

    gone: dict[str, str] = {}
    for rec in ledger.own_steps():
        if rec.uncached == "caching-disabled":
            continue  # its files were in a temp folder `datasets` deletes at exit
        for f in rec.files:
            if (
                f.path not in gone
                and not os.path.lexists(f.path)
                and not (removed and by_gc(f.path, rec.time))
            ):
                gone[f.path] = rec.result or "?"
    for path, fp in sorted(gone.items()):
        if shard is not None and not shard.holds(fp, path, checker.report.root):
            continue
        why = "recorded file no longer exists (removed since)"
        checker.findings.append(Finding("record-file-gone", why, fp, "record", Path(path)))


def _with_stale_findings(report: VerifyReport, scanned: CacheReport, shard: Shard | None) -> VerifyReport:
    """`report` plus an error for each entry computed by code that has changed since
    (`cachetool.history.explain.stale.stale_hits`). Each is about the first file of the step's record
    that the cache classifies as written by `datasets` (a record may name anything), or its first
    file when none is (then `--quarantine` moves nothing)."""
    from cachetool.history.explain.stale import stale_hits

    hits = stale_hits(report.root)
    if not hits:
        return report
    own = {os.fsdecode(f.path) for e in scanned.entries if e.kind in MOVABLE_KINDS for f in e.files}
    found = [
        Finding(
            "stale-code",
            s.message,
            s.fingerprint,
            "stale",
            Path(next((p for p in s.files if os.fsdecode(p) in own), s.files[0])),
            s.hint
            if s.written_under or s.inputs
            else "datasets hashes functions from your own modules by name: delete the entry and what was "
            f"made from it (`{s.gc_command}`, or --quarantine), or pass new_fingerprint= to the step",
        )
        for s in hits
        if s.files and (shard is None or shard.holds(s.fingerprint, s.files[0], report.root))
    ]
    return replace(report, findings=(*report.findings, *found))
