"""The checks verify makes on each entry of a scan, turned into findings.

A file a live process is writing right now is never reported as corrupt: it is "being written by
pid N". A save in progress looks like an interrupted one for a moment (state.json is written last),
so an incomplete save touched in the last minutes is a warning, not an error.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.entries import shard_gap
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, CacheReport, Entry
from cachetool.hints import gc_hint
from cachetool.maintenance.fdops import identity
from cachetool.maintenance.liveness import InUse
from cachetool.maintenance.locks import stale_guard
from cachetool.maintenance.verify.model import (
    CHANGED,
    TF_RECOMPUTE_HINT,
    Code,
    Finding,
    Problem,
    pids_text,
    recompute_hint,
)

#: An interrupted save younger than this may still be running (state.json comes last).
RECENT_SAVE_SECONDS = 300.0

#: The entry kinds whose problems are all about their files or their own completeness.
_LEFTOVERS = (Kind.TEMP, Kind.INCOMPLETE_PREPARE, Kind.INCOMPLETE_SAVE, Kind.LOCK, Kind.TF_CACHE)


class Checker:
    """Collects the findings about the entries of one scan (`entry(e)` for each)."""

    def __init__(self, report: CacheReport, in_use: InUse | Callable[[], InUse], now: float) -> None:
        """`in_use` may be a function that takes the liveness snapshot: it is then called the
        first time a check needs to know who holds a file (a leftover, a lock, a shard set being
        written), and a cache without any spends nothing on reading every process's files."""
        self.report = report
        self._in_use = in_use
        self.now = now
        self.findings: list[Finding] = []
        self.removed_folders: frozenset[Path] | None = None

    def recompute(self, e: Entry) -> str:
        """The hint for a damaged entry `e`: how it gets computed (or saved) again."""
        return recompute_hint(self.report.root, (e.unit or e.path) if e.kind == Kind.SAVED else None)

    @property
    def in_use(self) -> InUse:
        if callable(self._in_use):
            self._in_use = self._in_use()
        return self._in_use

    def gc_hint(self, e: Entry) -> str:
        """The gc command that removes this leftover now (it was just proven unheld)."""
        return gc_hint(self.report.root, os.fsdecode(e.path))

    def removable(
        self, code: Code, e: Entry, detail: str, path: Path | None = None, target: str = ""
    ) -> None:
        """A finding whose hint is the gc command that removes `target` (the entry's path)."""
        hint = gc_hint(self.report.root, target or os.fsdecode(e.path))
        self.add(code, e, path or e.path, detail, hint, command=True)

    def add(
        self,
        code: Code,
        e: Entry,
        path: Path,
        detail: str,
        hint: str = "",
        *,
        ident: tuple[int, int, int, int] | None = None,
        command: bool = False,
    ) -> None:
        """Add a finding; `command`: the hint is one whole command, to paste as it stands."""
        if ident is None:
            ident = _scanned_identity(e, path)
        self.findings.append(Finding(Problem(code, detail), e.id, e.kind.value, path, hint, ident, command))

    def writers_of(self, path: Path) -> frozenset[int]:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return frozenset()
        return self.in_use.writer_pids(st) or frozenset()

    def live_writer(self, e: Entry) -> tuple[Path, frozenset[int]] | None:
        for f in e.files:
            pids = self.writers_of(f.path)
            if pids:
                return f.path, pids
        return None

    def leased(self, e: Entry) -> bool:
        """A live lease's process (on this host or another) may be writing `e`: say so, as info."""
        lease = self.in_use.lease_over(e.modified)
        if lease is None:
            return False
        self.add("leased", e, e.path, f"may be being written by {lease} (a live lease)")
        return True

    # -- per entry ---------------------------------------------------------------------------
    def entry(self, e: Entry) -> None:
        if e.kind in _LEFTOVERS:
            return self.leftover(e)
        if e.kind == Kind.DOWNLOAD and e.problems:
            self.removable("incomplete-download", e, "; ".join(e.problems))
            return None
        if e.kind == Kind.OTHER:
            # The scan gives an entry of its own to symlinks and non-regular files only with a
            # problem; the file's mode, not the sentence, says which it is.
            odd = any(not stat.S_ISREG(f.mode) for f in e.files)
            for p in e.problems:
                self.add("not-regular-file" if odd else "odd-file", e, e.path, p)
            return None
        if e.kind == Kind.SHARDS and e.problems and self.shards_in_progress(e):
            self.add("shards-in-progress", e, e.path, "shard set being written right now")
            return None
        for f in e.files:
            self.file(e, f)
        reported = _file_problem_texts(e)
        gap = shard_gap(e.files, e.expected_files) if e.kind == Kind.SHARDS and e.expected_files else None
        for p in e.problems:
            if p == gap:
                # A num_proc map that did not finish: datasets loads each finished shard from the
                # cache and computes only the missing ones, so the finished ones are not damage.
                self.add("partial-shards", e, e.path, f"{p}: {_REUSED}")
            elif p not in reported:
                self.add("damaged", e, e.path, p, self.recompute(e))
        if e.kind == Kind.SOURCE:
            self.shard_lengths(e)
        return None

    def leftover(self, e: Entry) -> None:
        if e.kind == Kind.TEMP:
            self.temp(e)
        elif e.kind == Kind.INCOMPLETE_PREPARE:
            self.leftover_dir(e, "an interrupted load_dataset preparation")
        elif e.kind == Kind.INCOMPLETE_SAVE:
            self.incomplete_save(e)
        elif e.kind == Kind.LOCK:
            self.lock(e)
        else:
            self.tf_cache(e)

    def tf_cache(self, e: Entry) -> None:
        """A finished tf.data cache must have an index that parses and every data shard it names,
        as long as the index says; a killed writer's lockfile blocks the next run."""
        if e.state == "incomplete":
            for p in e.problems:
                self.add("tf-incomplete", e, e.path, p, TF_RECOMPUTE_HINT)
        elif e.state == "abandoned":
            self.removable("tf-abandoned", e, "; ".join(e.problems))
        elif e.state == "being-written":
            self.add("tf-being-written", e, e.path, "; ".join(e.problems))

    def file(self, e: Entry, f: CacheFile) -> None:
        s = f.summary
        if s is None:
            return
        if s.error is not None:
            pids = self.writers_of(f.path)
            if pids:
                self.add("being-written", e, f.path, f"being written by pid {pids_text(pids)}")
                return
            self.add("unreadable-header", e, f.path, s.error, self.recompute(e))
            return
        expected = expected_metadata_fingerprint(f)
        if expected is not None and s.fingerprint is not None and s.fingerprint != expected:
            self.add(
                "fingerprint-mismatch",
                e,
                f.path,
                _mismatch(s.fingerprint, expected),
                "the file was written under another name or overwritten; " + self.recompute(e),
            )

    def shards_in_progress(self, e: Entry) -> bool:
        """A num_proc map renames each shard into place when it finishes; while the others are
        still tmp* files held by live workers, the set is in progress, not broken."""
        assert e.fingerprint is not None
        folder = e.path.parent
        for other in self.report.entries:
            if other.kind != Kind.TEMP or other.path.parent != folder:
                continue
            if any(a.startswith(e.fingerprint + "_") for a in other.aliases) and self.live_writer(other):
                return True
        return False

    def shard_lengths(self, e: Entry) -> None:
        ds = next((d for d in self.report.datasets if d.path == e.dataset_dir), None)
        if ds is None or e.split is None:
            return
        lengths = ds.expected_shard_lengths(e.split)
        if not lengths or len(lengths) != len(e.files):
            return
        for f, want in zip(e.files, lengths, strict=True):
            got = f.summary.rows if f.summary else None
            if got is not None and f.summary is not None and f.summary.error is None and got != want:
                self.add(
                    "shard-length",
                    e,
                    f.path,
                    f"{got} rows, dataset_info.json shard_lengths says {want}",
                    self.recompute(e),
                )

    def temp(self, e: Entry) -> None:
        live = self.live_writer(e)
        if live is not None:
            self.add("being-written", e, e.path, f"being written by pid {pids_text(live[1])}")
            return
        holders = self.holders(e)
        if holders:
            self.add("held-open", e, e.path, f"temporary file held open by pid {pids_text(holders)}")
            return
        if self.leased(e):
            return
        self.removable("leftover-temp", e, "leftover temporary file of a killed writer")

    def holders(self, e: Entry) -> frozenset[int]:
        pids: set[int] = set()
        for f in e.files:
            try:
                pids |= self.in_use.pids(os.stat(f.path, follow_symlinks=False))
            except OSError:
                continue
        return frozenset(pids)

    def leftover_dir(self, e: Entry, what: str) -> None:
        live = self.live_writer(e)
        if live is not None:
            self.add(
                "being-written", e, e.path, f"{what} in progress: being written by pid {pids_text(live[1])}"
            )
            return
        if self.leased(e):
            return
        self.removable("leftover-prepare", e, f"leftover of {what}")

    def incomplete_save(self, e: Entry) -> None:
        live = self.live_writer(e)
        if live is not None:
            self.add(
                "being-written",
                e,
                e.path,
                f"save_to_disk in progress: being written by pid {pids_text(live[1])}",
            )
            return
        if self.leased(e):
            return
        age = self.now - (e.modified or 0.0)
        if age < RECENT_SAVE_SECONDS:
            self.add(
                "recent-save",
                e,
                e.path,
                f"data-*.arrow without state.json, last written {int(age)}s ago: a save in progress "
                "or an interrupted one",
                "verify again later; if it stays, it is interrupted",
            )
            return
        self.add(
            "interrupted-save",
            e,
            e.path,
            "data-*.arrow without state.json: an interrupted save_to_disk",
            "save it again; " + self.gc_hint(e),
        )

    def lock(self, e: Entry) -> None:
        """A lock is stale when what it guards is gone and nobody holds it (`maintenance.locks`)."""
        guard = stale_guard(e.path, self.report.root)
        if guard is not None:
            self.removable("stale-lock", e, f"stale lock: {guard.name} no longer exists")


def expected_metadata_fingerprint(f: CacheFile) -> str | None:
    """The fingerprint a `cache-*.arrow` file's schema metadata should hold, from its name."""
    parsed = layout.parse_cache_file(f.name)
    if parsed is None:
        return None
    fp, rank, count = parsed
    if rank is not None and count is not None:
        return layout.shard_fingerprint(fp, rank, count)
    return fp


def _mismatch(held: str, expected: str) -> str:
    return f"file holds fingerprint {held}, name says {expected}"


_REUSED = "a num_proc map that did not finish; datasets reuses the finished shards and computes the rest"


def _file_problem_texts(e: Entry) -> set[str]:
    """What the scan says in `e.problems` about single files, which `Checker.file` reports on its
    own: each file's header error and fingerprint mismatch, bare and after the file's name (the
    scan's form for sets). Rendered from the same header summaries and compared whole; the other
    problems are the entry's own (missing shards, rows, state.json)."""
    out: set[str] = set()
    for f in e.files:
        s = f.summary
        if s is None:
            continue
        texts = [s.error] if s.error else []
        expected = expected_metadata_fingerprint(f)
        if expected is not None and s.fingerprint is not None and s.fingerprint != expected:
            texts.append(_mismatch(s.fingerprint, expected))
        out.update(texts)
        out.update(f"{f.name}: {t}" for t in texts)
    return out


def _scanned_identity(e: Entry, path: Path) -> tuple[int, int, int, int] | None:
    """The identity of `path` as the scan read it: its stat now, if size and mtime are still the
    scan's; CHANGED if not; None for what is not one of the entry's regular files."""
    f = next((f for f in e.files if f.path == path), None)
    if f is None:
        return None
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return CHANGED
    if not stat.S_ISREG(st.st_mode):
        return None
    return identity(st) if (st.st_size, st.st_mtime) == (f.size, f.mtime) else CHANGED
