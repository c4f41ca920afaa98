"""`verify_cache`: the one entry point behind `cachetool verify`, with the same keywords."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from cachetool.cache.lookup import find_entry
from cachetool.cache.scan import scan_cache
from cachetool.errors import CachetoolError
from cachetool.history.ledger import Ledger
from cachetool.maintenance.liveness import scan_in_use
from cachetool.maintenance.verify.checks import Checker
from cachetool.maintenance.verify.deep import deep_pass
from cachetool.maintenance.verify.indices import check_indices
from cachetool.maintenance.verify.model import Finding, Problem, Severity, VerifyReport, stale_hint
from cachetool.maintenance.verify.quarantine_plan import QuarantinePlan, plan_quarantine
from cachetool.maintenance.verify.restore import restore as restore_quarantined

_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def verify_cache(
    root: str | os.PathLike[str],
    fingerprints: Sequence[str] = (),
    *,
    deep: bool = False,
    record: bool = False,
    stale: bool = False,
    quarantine: bool = False,
    dry_run: bool = False,
    restore: bool = False,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    ledger: Ledger | None = None,
    confirm: Callable[[QuarantinePlan], bool] | None = None,
    strict: bool = False,
) -> VerifyReport:
    """Check every entry of `root` (or the entries `fingerprints` name) and return the findings.

    `deep` reads and validates every buffer, on `jobs` threads (default: one per core), and
    compares every byte with the checksum stored for its file; `record` stores the checksums so a
    later deep verify reports changed bytes.
    `stale` adds an error for each entry computed by code that has changed since. `restore` first
    puts quarantined files back (`report.restored`). `quarantine` then moves what has errors aside
    (`plan_quarantine(report).execute()`): with `dry_run` nothing moves and `report.would_quarantine`
    says what would; `confirm(plan)`, when given, is asked first and moves nothing unless true.
    `strict` makes warnings fail too (`report.exit_code`). `record` without `deep`, or `dry_run`
    without `quarantine`, raise `CachetoolError` (usage) before anything is read."""
    if record and not deep:
        raise CachetoolError("--record needs --deep (checksums come from reading every byte)")
    if dry_run and not quarantine:
        raise CachetoolError("--dry-run needs --quarantine (verify alone moves nothing)")
    restored: list[tuple[Path, Path]] = []
    notes: list[str] = []
    if restore:
        restored = restore_quarantined(root, warn=notes.append)
    report = _check(root, fingerprints, deep=deep, record=record, jobs=jobs, progress=progress, ledger=ledger)
    report = replace(report, restored=tuple(restored), restore_notes=tuple(notes), strict=strict)
    if stale:
        report = with_stale_findings(report)
    if not quarantine:
        return report
    plan = plan_quarantine(report)
    if dry_run:
        return plan.dry_run()
    if plan.units and confirm is not None and not confirm(plan):
        return plan.report
    return plan.execute()


def _check(
    root: str | os.PathLike[str],
    fingerprints: Sequence[str],
    *,
    deep: bool,
    record: bool,
    jobs: int | None,
    progress: Callable[[int, int], None] | None,
    ledger: Ledger | None,
) -> VerifyReport:
    if ledger is None:  # a command that has loaded the ledger passes it
        ledger = Ledger.load(Path(root).expanduser().resolve(), follow=False)
    # Without `deep` every header is read again; with it the deep pass reads every byte anyway,
    # so the listing may take what the read index remembers (keyed by size, mtime and inode).
    usage = ledger.usage()  # once: the listing and the indices check both need it
    report = scan_cache(
        root,
        use_index=deep,
        usage=usage,
        liveness=scan_in_use,
        progress=(lambda n: progress(n, 0)) if progress is not None else None,
    )
    entries = list(report.entries)
    if fingerprints:
        chosen = {id(find_entry(report, fp, ledger)) for fp in fingerprints}
        entries = [e for e in entries if id(e) in chosen]
    checker = Checker(report, lambda: scan_in_use(root=report.root), time.time())  # when needed
    for e in entries:
        checker.entry(e)
    check_indices(checker, entries, {fp: u.parent for fp, u in usage.items()}, ledger)
    if not fingerprints:
        _ledger_findings(checker, ledger)
    bytes_checked = recorded = 0
    if deep or record:
        bytes_checked, recorded = deep_pass(
            checker, report, entries, record=record, jobs=jobs, progress=progress
        )
    findings = sorted(checker.findings, key=lambda f: (_ORDER[f.severity], os.fsdecode(f.path)))
    files_checked = sum(len(e.files) for e in entries)
    return VerifyReport(
        report.root, tuple(findings), len(entries), files_checked, bytes_checked, deep, recorded
    )


def _ledger_findings(checker: Checker, ledger: Ledger) -> None:
    """Records whose files are gone: information (a user removed them), not corruption. What gc
    removed after the record was written, and logged in the ledger, is history and says nothing."""
    removed: dict[str, float] = {}  # path gc removed (a file or a folder) -> when, the latest
    for gc in ledger.gc_records():
        for p in gc.paths:
            removed[p] = max(removed.get(p, gc.time), gc.time)

    def by_gc(path: str, written: float) -> bool:
        return any(removed.get(os.fspath(p), 0.0) >= written for p in (Path(path), *Path(path).parents))

    gone: dict[str, str] = {}
    for rec in ledger.own_steps():
        for f in rec.files:
            if (
                f.path not in gone
                and not os.path.lexists(f.path)
                and not (removed and by_gc(f.path, rec.time))
            ):
                gone[f.path] = rec.result or "?"
    for path, fp in sorted(gone.items()):
        problem = Problem("record-file-gone", "recorded file no longer exists (removed since)")
        checker.findings.append(Finding(problem, fp, "record", Path(path)))


def with_stale_findings(report: VerifyReport) -> VerifyReport:
    """`report` plus an error for each entry computed by code that has changed since
    (`cachetool.history.explain.stale_hits`): `verify_cache(..., stale=True)`. Each is about the
    first file of the step's record that the cache classifies as written by `datasets` (a record
    may name anything), or its first file when none is (then `--quarantine` moves nothing)."""
    from cachetool.cache.layout import MOVABLE_KINDS
    from cachetool.history.explain import stale_hits

    hits = stale_hits(report.root)
    if not hits:
        return report
    scanned = scan_cache(report.root, use_index=True, liveness=scan_in_use)
    own = {os.fsdecode(f.path) for e in scanned.entries if e.kind in MOVABLE_KINDS for f in e.files}
    found = [
        Finding(
            Problem("stale-code", s.message),
            s.fingerprint,
            "stale",
            Path(next((p for p in s.files if os.fsdecode(p) in own), s.files[0])),
            stale_hint(s.gc_command),
        )
        for s in hits
        if s.files
    ]
    return replace(report, findings=(*report.findings, *found))
