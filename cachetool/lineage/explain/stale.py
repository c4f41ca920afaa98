"""Stale cache hits: entries computed by code that has changed since.

A function imported from the user's own module is pickled by reference, so editing it keeps the
fingerprint and `datasets` reuses the old result. `stale_hits(root)` finds cache entries whose
computing code (the function, or a helper it calls) changed since: by a later recorded run, or in
the source file on disk now.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from cachetool.lineage.explain.model import SourceChange, StaleHit, StepRef
from cachetool.lineage.explain.sources import (
    def_line,
    diff_lines,
    function_source,
    line_changes,
    strip_module,
    tokens,
)
from cachetool.lineage.explain.view import LedgerView, first_line, load_view
from cachetool.lineage.records import FunctionInfo, FunctionRef, StepRecord


def _by_reference_parts(fn: FunctionInfo) -> list[FunctionRef]:
    """The function and helpers of a record that `datasets` hashes by name only."""
    parts: list[FunctionRef] = []
    if fn.by_reference:
        parts.append(fn)
    parts.extend(fn.deps)
    return parts


def stale_for_hit(view: LedgerView, hit: StepRecord) -> list[StaleHit]:
    """A hit whose function or helpers differ from those of the computation it reused."""
    fn_hit = hit.function
    fp = hit.result
    if fn_hit is None or fp is None:
        return []
    comp = view.computing(fp, before=hit.time)
    if comp is None or comp.function is None:
        return []
    then = {str(p.qualname): p for p in _by_reference_parts(comp.function)}
    changes = []
    for part in _by_reference_parts(fn_hit):
        old = then.get(str(part.qualname))
        if old is None:
            continue
        a, b = old.code_hash, part.code_hash
        differs = a != b if a and b else old.source_hash != part.source_hash
        if differs:
            changes.append(
                SourceChange(str(part.qualname), part.file, tuple(line_changes(view.sources, old, part)))
            )
    if not changes:
        return []
    return [
        StaleHit(
            fingerprint=fp,
            files=hit.file_paths,
            computed_at=comp.time,
            computed_run=comp.run or None,
            reused_at=hit.time,
            reused_run=hit.run or None,
            changes=tuple(changes),
            step=StepRef.of(hit),
        )
    ]


def stale_hits(
    root: str | os.PathLike[str], *, view: LedgerView | None = None, only: str | None = None
) -> list[StaleHit]:
    """Cache entries of `root` that still exist and were computed by code that has changed since:
    a function from the user's own module (or a helper of theirs it calls), which `datasets`
    hashes by name, so the entry is (or will be) reused although the code is new.

    Two kinds of evidence, the latest per entry: a later recorded run reused it with other code
    (`reused_at` set), or the source file on disk now differs from the code recorded when it was
    computed (`reused_at` None). Changes in comments and blank lines do not count.

    The Python side of `cachetool verify --stale`."""
    view = view or load_view(root)
    root_abs = os.path.abspath(os.fspath(root))
    out: list[StaleHit] = []
    disk_cache: dict[str, str | None] = {}
    for fp, recs in view.by_result.items():
        if only is not None and fp != only:
            continue
        comp = view.computing(fp)
        if comp is None or comp.function is None:
            continue
        files = list(comp.file_paths)
        if not files or not all(os.path.exists(p) for p in files):
            continue
        if not any(os.path.abspath(p).startswith(root_abs + os.sep) for p in files):
            continue
        later = [r for r in recs if r.cache == "hit" and r.time > comp.time]
        found: list[StaleHit] = []
        for hit in reversed(later):
            found = stale_for_hit(view, hit)
            if found:
                break
        changes, checked = _disk_changes(view, comp.function, disk_cache)
        if not checked:
            # The sources cannot be read here (another machine, a moved file): the runs decide.
            out.extend(found)
        elif changes:
            out.append(
                StaleHit(
                    fingerprint=fp,
                    files=tuple(files),
                    computed_at=comp.time,
                    computed_run=comp.run or None,
                    reused_at=found[0].reused_at if found else None,
                    reused_run=found[0].reused_run if found else None,
                    changes=tuple(changes),
                    step=StepRef.of(comp),
                )
            )
    out.sort(key=lambda s: (s.computed_at or 0.0, s.fingerprint))
    return [replace(s, root=root_abs) for s in out]


def _disk_changes(
    view: LedgerView, fn: FunctionInfo, files: dict[str, str | None]
) -> tuple[list[SourceChange], int]:
    """The by-reference parts of `fn` whose source on disk now differs from the recorded one, and
    how many parts could be compared at all."""
    changes = []
    checked = 0
    for part in _by_reference_parts(fn):
        recorded = view.sources.get(str(part.source_hash))
        path = part.file
        if recorded is None or path is None:
            continue
        if path not in files:
            try:
                files[path] = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                files[path] = None
        text = files[path]
        if text is None:
            continue
        qualname = str(part.qualname)
        local = strip_module(qualname, path) or qualname.split(".", 1)[-1]
        current = function_source(text, local)
        if current is None:
            continue
        checked += 1
        if tokens(current) == tokens(recorded):
            continue
        start = first_line(part)
        lines = diff_lines(recorded, current, start, def_line(text, local) or start)
        changes.append(SourceChange(qualname, path, tuple(lines)))
    return changes, checked
