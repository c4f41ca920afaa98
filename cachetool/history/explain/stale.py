"""Stale cache hits: entries computed by code of the user's own modules that has changed since
(`datasets` hashes it by name), found by a later recorded run or in the source file on disk now;
and source texts compared (the lines that changed; comments and blank lines ignored).
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import textwrap
import tokenize
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from cachetool.formatting import clock_time
from cachetool.history.explain.answer import LineChange, SourceChange, StaleHit, StepRef, strip_module
from cachetool.history.graph import StepGraph
from cachetool.history.ledger import Ledger
from cachetool.history.records.parts import DataFile, FunctionInfo, FunctionRef
from cachetool.history.records.steps import StepRecord

_MAX_LINES = 6


def _by_reference_parts(fn: FunctionInfo) -> list[FunctionRef]:
    """The function and helpers of a record that `datasets` hashes by name only."""
    return [fn, *fn.deps] if fn.by_reference else list(fn.deps)


def _code_changes(view: StepGraph, old: FunctionInfo, new: FunctionInfo) -> list[SourceChange]:
    """The by-reference parts (`datasets` hashes them by name) whose code differs between two
    recorded versions of a step's function: the parts of `new` that `old` had too."""
    then = {str(p.qualname): p for p in _by_reference_parts(old)}
    changes = []
    for part in _by_reference_parts(new):
        was = then.get(str(part.qualname))
        if was is None:
            continue
        a, b = was.code_hash, part.code_hash
        differs = a != b if a and b else was.source_hash != part.source_hash
        values = tuple(n for n, d in part.reads.items() if was.reads.get(n, d) != d)
        if differs or values:
            lines = tuple(line_changes(view.sources, was, part)) if differs else ()
            changes.append(SourceChange(str(part.qualname), part.file, lines, values))
    return changes


def _hit(
    fp: str, files: tuple[str, ...], comp: StepRecord, reused: StepRecord | None, step: StepRecord, **kw: Any
) -> StaleHit:
    """The stale entry `fp` computed by `comp`, reused by `reused` (None: not seen reused), shown as
    `step` (a source when that is a root, unless `source` is given)."""
    kw.setdefault("source", step.type == "root")
    return StaleHit(
        fingerprint=fp,
        files=files,
        computed_at=comp.time,
        computed_run=comp.run or None,
        reused_at=reused.time if reused is not None else None,
        reused_run=(reused.run or None) if reused is not None else None,
        step=StepRef.of(step),
        **kw,
    )


def written_under(fp: str, path: str) -> str | None:
    """The fingerprint the file `path` a step named (`cache_file_name=`) was written under, when
    it is not the step's `fp`: `datasets` loads a named file whatever changed. None for a file
    named as `datasets` names one (`cache-<fp>…`, not read: `cast` writes it under another
    fingerprint than its result's) or written under `fp`."""
    from cachetool.cache.arrow import read_summary
    from cachetool.cache.layout import parse_cache_file

    if parse_cache_file(os.path.basename(path)) is not None:
        return None

    written = read_summary(path).fingerprint
    return written if written and not written.startswith(fp) else None


def stale_for_hit(view: StepGraph, hit: StepRecord) -> list[StaleHit]:
    """A hit whose function or helpers differ from those of the computation it reused, whose
    fingerprint is a random fallback that repeats after `random.seed` (whatever the code), or that
    loaded a file it named, written under another fingerprint (`StaleHit.written_under`)."""
    fn_hit = hit.function
    fp = hit.result
    written = written_under(fp, hit.files[0].path) if fp and hit.type == "transform" and hit.files else None
    if fp is not None and written is not None:
        made = view.computing(written) or hit
        # gc calls a file outside a dataset's folder (of a name of the user's) a source
        where = {"root": hit.where or None, "source": True}
        return [_hit(fp, hit.file_paths, made, hit, hit, changes=(), written_under=written, **where)]
    predictable = hit.random_fallback is not None and hit.random_fallback.predictable
    if (fn_hit is None and not predictable) or fp is None:
        return []
    comp = view.computing(fp, before=hit.time)
    if predictable:
        found = _hit(
            fp, hit.file_paths, comp or hit, hit, hit, changes=(), root=hit.where or None, predictable=True
        )
        return [found if comp else replace(found, computed_at=None, computed_run=None)]  # computed untraced
    if fn_hit is None or comp is None or comp.function is None:
        return []
    changes = _code_changes(view, comp.function, fn_hit)
    recorded = hit.source.gen_files if hit.source is not None else ()
    inputs = input_changes(comp, recorded) if recorded else ()
    if not changes and not inputs:
        return []
    return [
        _hit(
            fp, hit.file_paths, comp, hit, hit, changes=tuple(changes), inputs=inputs, root=hit.where or None
        )
    ]


def input_changes(comp: StepRecord, now: tuple[DataFile, ...] | None = None) -> tuple[str, ...]:
    """The files `comp`'s generator was given by name that differ from `now` (as a later run
    recorded them; None: as they are on disk now), each as `words.txt: size 4 → 6 bytes`."""
    then = comp.source.gen_files if comp.source is not None else ()
    if now is None:
        now = tuple(_on_disk(f.path) for f in then)
    seen = {f.path: f for f in now}
    out = []
    for old in then:
        new = seen.get(old.path)
        name = os.path.basename(old.path)
        if new is None or new.size is None:
            out.append(f"{name}: removed")
        elif new.size != old.size:
            out.append(f"{name}: size {old.size} → {new.size} bytes")
        elif new.mtime != old.mtime:
            out.append(f"{name}: modified {clock_time(new.mtime or 0)}")
    return tuple(out)


def _on_disk(path: str) -> DataFile:
    try:
        st = os.stat(path)
    except OSError:
        return DataFile(None, path)
    return DataFile(None, path, st.st_size, st.st_mtime)


#: What makes a result stale though its own code is the same: the step upstream it was made
#: from, when that step was recomputed by changed code (None: its result is stale itself), and
#: the files that step's generator reads that changed, when they are why (`StaleHit.inputs`).
_Cause = tuple[StepRef, float | None, tuple[str, ...]]


def _changed_on_disk(view: StepGraph, rec: StepRecord) -> bool:
    """The code of `rec`'s function (its by-reference parts) differs on disk now, asked once per
    record (`verify --stale` asks of every entry's ancestors)."""
    found = view.on_disk.get(id(rec))
    if found is None:
        fn = rec.function
        found = view.on_disk[id(rec)] = fn is not None and bool(_disk_changes(view, fn)[0])
    return found


def stale_input(
    view: StepGraph, fp: str, made_at: float, stale: Mapping[str, StaleHit], disk: bool = False
) -> _Cause | None:
    """Why the result of `fp` made at `made_at` is stale although its own code is unchanged: the
    nearest ancestor whose result is stale (`stale`, by fingerprint; the step that made that one
    stale when it is derived itself), or whose result `fp` was made from was computed by code
    that has changed since: recomputed later by other code, or (with `disk`) other code on disk now."""
    for anc in view.upstream(fp):
        found = stale.get(anc)
        if found is not None:
            inputs = () if found.changes else found.inputs
            return (found.derived_from or found.step, found.recomputed_at, inputs)
        old = view.computing(anc, before=made_at)
        if old is None or old.function is None:
            continue
        new = view.computing(anc)
        fn = new.function if new is not None and new is not old else None
        if new is not None and fn is not None and _code_changes(view, old.function, fn):
            return StepRef.of(new), new.time, ()
        if disk and _changed_on_disk(view, old):
            return StepRef.of(old), None, ()
    return None


def derived_hit(
    fp: str, comp: StepRecord, files: tuple[str, ...], cause: _Cause, reused: StepRecord | None = None
) -> StaleHit:
    """The stale entry `fp` (computed by `comp`), made from a stale result upstream."""
    step = reused or comp
    return _hit(
        fp,
        files,
        comp,
        reused,
        step,
        changes=(),
        root=step.where or None,
        derived_from=cause[0],
        recomputed_at=cause[1],
        inputs=cause[2],
        source=comp.type == "root",
    )


def with_removals(view: StepGraph, found: Iterable[StaleHit]) -> list[StaleHit]:
    """`found`, each with the stale entries made from it that still exist (`StaleHit.remove`):
    the hint removes them in one command."""
    found = list(found)
    present = [s.fingerprint for s in found if s.files and all(os.path.exists(p) for p in s.files)]
    sources = {s.written_under or s.fingerprint for s in found if s.source}
    out = []
    for s in found:
        family = [fp for fp in present if fp == s.fingerprint or s.fingerprint in view.upstream(fp)]
        first = s.written_under or s.fingerprint  # a named file is the entry it was written under
        remove = tuple(dict.fromkeys([first, *(fp for fp in family if fp != s.fingerprint)]))
        out.append(replace(s, remove=remove, remove_sources=bool(sources.intersection(remove))))
    return out


def stale_hits(
    root: str | os.PathLike[str],
    *,
    view: StepGraph | None = None,
    only: str | Collection[str] | None = None,
) -> list[StaleHit]:
    """Cache entries of `root` that still exist and were computed by code that has changed since:
    a function from the user's own module (or a helper of theirs it calls), which `datasets`
    hashes by name, so the entry is (or will be) reused although the code is new; and every
    entry made from such a result (`StaleHit.derived_from`), though its own code is the same.
    `only`: these fingerprints (and what they are made from).

    Two kinds of evidence, the latest per entry: a later recorded run reused it with other code
    (`reused_at` set), or the source file on disk now differs from the code recorded when it was
    computed (`reused_at` None). Changes in comments and blank lines do not count.

    The Python side of `cachetool verify --stale`."""
    view = view or Ledger.load(root).view
    root_abs = os.path.abspath(os.fspath(root))
    wanted = None if only is None else {only} if isinstance(only, str) else set(only)
    scope = None if wanted is None else wanted.union(*(view.upstream(fp) for fp in wanted))
    stale: dict[str, StaleHit] = {}
    entries: dict[str, tuple[StepRecord, tuple[str, ...], StepRecord | None]] = {}
    for fp, recs in view.by_result.items():
        if scope is not None and fp not in scope:
            continue
        comp = view.computing(fp)
        if comp is None:  # loaded only: a file it named, of another fingerprint, is stale
            found = [s for r in recs[-1:] if r.cache == "hit" for s in stale_for_hit(view, r)]
            stale.update((s.fingerprint, s) for s in found if s.written_under and _inside(s.files, root_abs))
            continue
        files = tuple(comp.file_paths)
        if not files or not all(os.path.exists(p) for p in files):
            continue
        if not _inside(files, root_abs):
            continue
        later = [r for r in recs if r.cache == "hit" and r.time > comp.time]
        entries[fp] = (comp, files, later[-1] if later else None)
        if comp.function is None:  # no code of the user's (cast_column, train_test_split): made
            continue  # from a stale result at most, found below
        # The latest reuse by other code, if any.
        reused, found = next(((h, f) for h in reversed(later) if (f := stale_for_hit(view, h))), (None, []))
        changes, checked = _disk_changes(view, comp.function)
        inputs = input_changes(comp)
        if inputs:  # a file the generator reads changed (its code may have too)
            stale[fp] = _hit(fp, files, comp, reused, comp, changes=tuple(changes), inputs=inputs)
        elif not checked:
            # The sources cannot be read here (another machine, a moved file): the runs decide.
            stale.update((s.fingerprint, s) for s in found)
        elif changes:
            stale[fp] = _hit(fp, files, comp, reused, comp, changes=tuple(changes))
        else:  # the code on disk is as it was; a value it reads is not on disk: the runs decide
            stale.update((s.fingerprint, s) for s in found if any(c.values for c in s.changes))
    # Ancestors before descendants: an ancestor has fewer ancestors than what is made from it.
    for fp in sorted(entries, key=lambda x: len(view.upstream(x))):
        if fp in stale:
            continue
        comp, files, reused = entries[fp]
        cause = stale_input(view, fp, comp.time, stale, disk=True)
        if cause is not None:
            stale[fp] = derived_hit(fp, comp, files, cause, reused)
    out = sorted(stale.values(), key=lambda s: (s.computed_at or 0.0, s.fingerprint))
    if wanted is not None:
        out = [s for s in out if s.fingerprint in wanted]
    return with_removals(view, (replace(s, root=root_abs) for s in out))


def _inside(files: Iterable[str], root_abs: str) -> bool:
    return any(os.path.abspath(p).startswith(root_abs + os.sep) for p in files)


def _disk_changes(view: StepGraph, fn: FunctionInfo) -> tuple[list[SourceChange], int]:
    """The by-reference parts of `fn` whose source on disk now differs from the recorded one, and
    how many parts could be compared at all (the files read are kept in `view.disk`)."""
    changes = []
    checked = 0
    for part in _by_reference_parts(fn):
        recorded = view.sources.get(str(part.source_hash))
        path = part.file
        if recorded is None or path is None:
            continue
        files = view.disk
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
        found = definition(text, local)
        if found is None:
            continue
        current, at = found
        checked += 1
        if tokens(current) == tokens(recorded):
            continue
        lines = diff_lines(recorded, current, part.line or 1, at)
        changes.append(SourceChange(qualname, path, tuple(lines)))
    return changes, checked


def line_changes(sources: Mapping[str, str], fa: FunctionRef, fb: FunctionRef) -> list[LineChange]:
    """The changed lines between two recorded versions of a function (`sources`: recorded texts
    by source hash); none when either text is not recorded."""
    old_text = sources.get(str(fa.source_hash))
    new_text = sources.get(str(fb.source_hash))
    if old_text is None or new_text is None:
        return []
    return diff_lines(old_text, new_text, fa.line or 1, fb.line or 1)


def diff_lines(old: str, new: str, start_old: int = 1, start_new: int = 1) -> list[LineChange]:
    """Changed lines between two versions of a function, numbered in the file (the newer one
    for changed and added lines)."""
    a, b = old.splitlines(), new.splitlines()
    out: list[LineChange] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            before = a[i1 + k].strip() if i1 + k < i2 else None
            after = b[j1 + k].strip() if j1 + k < j2 else None
            line = start_new + j1 + k if after is not None else start_old + i1 + k
            out.append(LineChange(line, before, after))
            if len(out) >= _MAX_LINES:
                return out
    return out


def definition(text: str, qualname: str) -> tuple[str, int] | None:
    """The source of the function `qualname` in a module's text, as `inspect.getsource` gives
    it (decorators included), and the line it starts at; None when it is not there any more."""
    try:
        node: ast.AST = ast.parse(text)
    except SyntaxError:
        return None
    for part in qualname.split("."):
        defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        found = [c for c in getattr(node, "body", ()) if isinstance(c, defs) and c.name == part]
        if not found:
            return None
        node = found[-1]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return "".join(text.splitlines(keepends=True)[start - 1 : node.end_lineno]), start


def tokens(source: str) -> list[tuple[int, str]] | str:
    """The tokens of a piece of source without comments, blank lines and indentation amounts: two
    versions with equal tokens are the same code."""
    try:
        toks = tokenize.generate_tokens(io.StringIO(textwrap.dedent(source)).readline)
        return [
            (t.type, t.string)
            for t in toks
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
        ]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return source.strip()
