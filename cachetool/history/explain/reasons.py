"""Comparing two records of one step: what differs, as typed `Reason`s."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from cachetool.formatting import clock_time, short_duration
from cachetool.history.explain.answer import UNCACHED_TEXT, Reason, StepRef
from cachetool.history.explain.stale import _code_changes, line_changes
from cachetool.history.graph import StepGraph
from cachetool.history.records.other import GcRecord
from cachetool.history.records.parts import ArgInfo, FunctionInfo, RandomFallback, SourceInfo
from cachetool.history.records.steps import StepRecord

if TYPE_CHECKING:
    from cachetool.fingerprint.diff import Culprit
    from cachetool.fingerprint.tree import HashNode

#: Arguments `datasets` hashes that do not change the data a step produces.
NON_SEMANTIC = frozenset(
    {
        "writer_batch_size",
        "keep_in_memory",
        "num_proc",
        "desc",
        "load_from_cache_file",
        "cache_file_name",
        "indices_cache_file_name",
        "train_indices_cache_file_name",
        "test_indices_cache_file_name",
        "suffix_template",
    }
)
_MAX_UPSTREAM = 50
#: The culprit kinds (`cachetool.fingerprint.diff.hint_for`) that vary from process to process,
#: and how, in check-determinism's words (its variations).
_VARIES = {
    "set-order": "depends on PYTHONHASHSEED",
    "order": "depends on PYTHONHASHSEED",
    "timestamp": "changes on every run (a time taken at run time)",
    "uuid": "changes on every run",
    "address": "changes on every run (a memory address)",
    "temp-path": "changes on every run (a temporary path)",
    "random-state": "changes on every run",
}
NONDETERMINISTIC_KINDS = frozenset(_VARIES)


def compare(view: StepGraph, new: StepRecord, old: StepRecord, depth: int = 0) -> list[Reason]:
    """What differs between two records of the same step, `old` computed before `new`."""
    new_s, old_s = view.with_summaries(new), view.with_summaries(old)
    rf = new.random_fallback or old.random_fallback
    if rf is not None:
        return [random_reason(new_s if new.random_fallback else old_s, rf, earlier=not new.random_fallback)]
    if new.type == "root":
        return _source_reasons(view, new, old, depth)
    reasons: list[Reason] = []
    if new.fingerprint_given or old.fingerprint_given:
        a, b = (str(r.result) if r.fingerprint_given else f"(hashed: {r.result})" for r in (old, new))
        message = f"new_fingerprint= changed {a} → {b}"
        return [Reason("fingerprint-given", message, "new_fingerprint", None, a, b)]
    if new.parents != old.parents:
        reasons.extend(_input_reasons(view, new, old, depth))
    if new.transform != old.transform:
        reasons.append(_versions_reason(new, old))
    reasons.extend(_argument_reasons(view, new_s, old_s))
    unseen = "no recorded argument differs (the fingerprints were made from something cachetool does not see)"
    return reasons or [Reason("unexplained", unseen)]


def random_reason(rec: StepRecord, rf: RandomFallback, earlier: bool) -> Reason:
    from cachetool.fingerprint.diff import (
        PREDICTABLE_FALLBACK,
        PREDICTABLE_HINT,
        find_unpicklable,
        render_path,
    )
    from cachetool.fingerprint.tree import as_node

    argument, error, error_type = rf.argument, rf.error, rf.error_type
    err = f"{error_type}: {error}" if error_type and error else str(error or error_type or "unknown error")
    path = argument
    what = f"`{argument}`" if argument else "the transform"
    arg = rec.args.get(argument) if argument else None
    if arg is not None and arg.summary is not None:
        found = find_unpicklable(str(argument), as_node(arg.summary))
        if found is not None:
            path = render_path(str(argument), found.path)
            what = f"`{path}` ({found.description})"
    if earlier:
        message = f"the earlier run used a random fingerprint ({what} could not be hashed: {err})"
    else:
        message = f"datasets used a random fingerprint: {what} cannot be hashed ({err})"
    hint = (
        "a random fingerprint is new in every run, so the step is always recomputed: make the "
        "argument picklable (create it inside the function), or pass new_fingerprint="
    )
    if rf.predictable:
        message, hint = f"{message}; {PREDICTABLE_FALLBACK}", PREDICTABLE_HINT
    return Reason("random", message, argument=argument, path=path, hint=hint)


def predictable_warning(rec: StepRecord, rf: RandomFallback) -> str:
    """What a traced run says of a step whose fallback fingerprint `rf` repeats after `random.seed`."""
    reason = random_reason(rec, rf, earlier=False)
    files = rec.file_paths if rec.cache == "hit" else ()
    loaded = f"; this run loaded {os.path.basename(files[0])}: probably stale" if files else ""
    return f"{StepRef.of(rec).label}: {reason.message}{loaded}. Hint: {reason.hint}"


def _versions_reason(new: StepRecord, old: StepRecord) -> Reason:
    va, vb = old.versions.get("datasets"), new.versions.get("datasets")
    extra = f" (datasets {va} → {vb})" if va != vb else ""
    message = f"datasets hashes this step differently now: {old.transform} → {new.transform}{extra}"
    return Reason("versions", message, before=str(old.transform), after=str(new.transform))


def _input_reasons(view: StepGraph, new: StepRecord, old: StepRecord, depth: int) -> list[Reason]:
    """The parent fingerprints differ: explain the parent against the old parent, upstream."""
    new_parents, old_parents = list(new.parents), list(old.parents)
    out: list[Reason] = []
    for i, p_new in enumerate(new_parents):
        p_old = old_parents[i] if i < len(old_parents) else None
        if p_new == p_old:
            continue
        rec_new = view.origin(p_new, before=new.time + 1e-6)
        rec_old = view.origin(p_old, before=old.time + 1e-6) if p_old is not None else None
        if rec_new is None or rec_old is None or depth >= _MAX_UPSTREAM:
            message = f"its input changed ({p_old} → {p_new}); the step that made it is not recorded"
            out.append(Reason("input", message, before=p_old, after=p_new))
            continue
        upstream = StepRef.of(rec_new)
        for r in compare(view, rec_new, rec_old, depth + 1):
            if r.upstream is None:
                r = replace(r, upstream=upstream, upstream_loaded=rec_new.cache == "hit")
            out.append(r)
    if len(old_parents) > len(new_parents):
        out.append(Reason("input", "it has fewer inputs than before"))
    return out


def _source_reasons(view: StepGraph, new: StepRecord, old: StepRecord, depth: int) -> list[Reason]:
    src_new, src_old = new.source or SourceInfo(), old.source or SourceInfo()
    if src_new.kind == "builder":
        reordered = _reordered_files(src_old, src_new)
        if reordered is not None:
            return [reordered]
        if new.args or old.args:  # a generator's gen_kwargs: what in them differs
            by_args = _argument_reasons(view, view.with_summaries(new), view.with_summaries(old))
            if by_args:
                return by_args
        files_new = {f.path: f for f in src_new.data_files}
        files_old = {f.path: f for f in src_old.data_files}
        parts = []
        for path in sorted(set(files_new) | set(files_old)):
            a, b = files_old.get(path), files_new.get(path)
            name = os.path.basename(path)
            if a is None:
                parts.append(f"{name} added")
            elif b is None:
                parts.append(f"{name} removed")
            elif a.size != b.size:
                parts.append(f"{name} modified (size {a.size} → {b.size} bytes)")
            elif a.mtime != b.mtime:
                parts.append(f"{name} modified (modified {clock_time(b.mtime)})")
        builder = src_new.builder or "?"
        if parts:
            message = f"the source dataset changed: {', '.join(parts)}"
        elif src_new.split != src_old.split and src_new.relative_data_dir == src_old.relative_data_dir:
            message = f"another split was asked for ({src_old.split} → {src_new.split})"
        elif src_new.relative_data_dir != src_old.relative_data_dir:
            message = (
                f"the source dataset changed: the {builder} builder's data or configuration differs "
                f"({src_old.relative_data_dir} → {src_new.relative_data_dir})"
            )
        else:
            message = f"the source dataset changed ({old.result} → {new.result})"
        dirs = (str(src_old.relative_data_dir), str(src_new.relative_data_dir))
        return [Reason("source", message, None, None, *dirs)]
    if src_new.kind == "saved":
        states = (src_old.state_fingerprint, src_new.state_fingerprint)
        message = f"the saved dataset at {src_new.path} holds another state ({states[0]} → {states[1]})"
        return [Reason("source", message, None, None, *states)]
    if new.parents != old.parents:
        return _input_reasons(view, new, old, depth)
    return [Reason("source", "the source data changed (an in-memory dataset or a file of its own)")]


def _reordered_files(old: SourceInfo, new: SourceInfo) -> Reason | None:
    """The same data files, listed in another order (a list built from a set): check-determinism's
    words for it."""
    from cachetool.fingerprint.diff import ORDER_HINTS, reordered

    a = [os.path.basename(f.path) for f in old.data_files]
    b = [os.path.basename(f.path) for f in new.data_files]
    if not reordered([a, b]):
        return None
    before, after = ", ".join(a), ", ".join(b)
    message = (
        f"the same {len(a)} data files in another order ({before} → {after}), which {_VARIES['order']} when "
        "the list comes from a set — not a change of yours; run `cachetool check-determinism` on the script"
    )
    hint = ORDER_HINTS["data_files order"]
    return Reason("nondeterministic", message, "data_files", "data_files", before, after, hint=hint)


def _argument_reasons(view: StepGraph, new: StepRecord, old: StepRecord) -> list[Reason]:
    args_new, args_old = new.args, old.args
    differing = [
        name
        for name in sorted(set(args_new) | set(args_old))
        if (a := args_old.get(name)) is None
        or (b := args_new.get(name)) is None
        or (a.digest != b.digest if a.digest is not None and b.digest is not None else a.repr != b.repr)
    ]
    if not differing:
        return []
    if all(name in NON_SEMANTIC for name in differing):
        values = {n: (_repr(args_old.get(n)), _repr(args_new.get(n))) for n in differing}
        changes = ", ".join(f"{n} {a} → {b}" for n, (a, b) in values.items())
        message = f"only {changes} changed, which does not change the result (datasets hashes it anyway)"
        hint = "pass the same value every time, or new_fingerprint= to keep the cached result"
        return [Reason("non-semantic", message, differing[0], None, *values[differing[0]], hint=hint)]
    out = []
    for name in differing:
        if name == "function":
            out.extend(_function_reasons(view, new, old))
        else:
            out.extend(_value_reasons(view, new, old, name))
    return out


def _repr(entry: ArgInfo | None) -> str:
    # datasets leaves out arguments equal to their default before hashing.
    if entry is None:
        return "(default)"
    return entry.repr if entry.repr is not None else f"<{entry.type or '?'}>"


def _value_reasons(view: StepGraph, new_rec: StepRecord, old_rec: StepRecord, name: str) -> list[Reason]:
    """An argument other than the function changed: name the part, with its values."""
    found = _culprit_reasons(view, new_rec, old_rec, name)
    return found or [_changed(name, name, _repr(old_rec.arg(name)), _repr(new_rec.arg(name)))]


def _culprit_reasons(view: StepGraph, new: StepRecord, old: StepRecord, name: str) -> list[Reason] | None:
    """What the part of argument `name` that differs is, as their recorded summaries say (None
    when they do not), one reason per place where it differs in several (a frozenset on an
    attribute and a set literal in a method of one object; a part present in one run only, an
    item appended, is said of what holds it; places that all differ below what the ledger keeps,
    of what holds them)."""
    from cachetool.fingerprint.diff import diff_trees
    from cachetool.fingerprint.tree import as_node

    a, b = old.arg(name), new.arg(name)
    if a is None or b is None or a.summary is None or b.summary is None:
        return None
    culprit = diff_trees(name, [as_node(a.summary), as_node(b.summary)])
    if culprit is None:
        return None
    places = culprit.parts if culprit.parts and all(p.kind != "added" for p in culprit.parts) else ()
    reasons = [_part_reason(view, new, old, part) for part in places or (culprit,)]
    if places and all(r.kind == "argument" and r.before is None for r in reasons):
        return [_part_reason(view, new, old, replace(culprit, parts=()), below=True)]
    return reasons


def _part_reason(
    view: StepGraph, new: StepRecord, old: StepRecord, part: Culprit, below: bool = False
) -> Reason:
    """One part that differs: varying by itself (check-determinism's words), hashing alike with the
    same text (by itself too), changed by an earlier step, differing below what the ledger keeps of
    it (`below`, or the part is where its summary stops), or changed by the user (its values)."""
    from cachetool.fingerprint.diff import render_path

    path = render_path(part.argument, part.path)
    if part.kind in NONDETERMINISTIC_KINDS or part.kind == "code":
        return _nondeterministic(part.argument, path, part.description, part.hint, part.kind)
    # A module of the user's is a leaf of the tree, yet dill pickles it with all it holds.
    below = below or part.type == "module" or _summary_stops_at(view, new, part.argument, part.path)
    if not below and not part.text_differs and any(part.reprs):
        return _nondeterministic(part.argument, path, part.description, part.hint, part.kind)
    state = _cache_state(view, new, old, part.argument, part.path)
    if state is not None:
        return state
    if not part.text_differs:
        where = "below the levels the ledger keeps of it" if below else "(the ledger keeps no text of it)"
        edits = _module_edits(view, new, old, part) if part.type == "module" else ""
        message = (
            f"`{path}` ({part.description}) differs {where}{edits}: a change of yours, or a value made at "
            "run time (`cachetool check-determinism` on the script names the latter)"
        )
        return Reason("argument", message, part.argument, path)
    # The ledger keeps a value's text only when it is short: one side may have none.
    unkept = "a value too long for the ledger to keep its text"
    before, after = (r or unkept for r in (part.reprs[0], part.reprs[-1]))
    changed = _changed(part.argument, path, before, after)
    fa, fb = old.function or FunctionInfo(), new.function or FunctionInfo()
    same_source = fa.source_hash is not None and fa.source_hash == fb.source_hash
    if len(part.path) == 1 and part.path[0].startswith("default ") and same_source:
        # The same `def` line gave another default: it is computed when the script runs.
        message = f"{changed.message} (the source is the same: the default is computed when the script runs)"
        hint = (
            "a default computed when the script runs (random.random(), time.time(), an environment "
            "variable) changes the fingerprint with its value: compute it inside the function, or pass "
            "it in fn_kwargs"
        )
        return replace(changed, message=message, hint=hint)
    return changed


def _module_edits(view: StepGraph, new: StepRecord, old: StepRecord, part: Culprit) -> str:
    """` (in helpers.py: STOP changed)`: what the records of the step's helpers say changed in the
    module `part` is, or "" when they say nothing."""
    name = part.reprs[-1].removeprefix("<module ").removesuffix(">")
    fa, fb = old.function or FunctionInfo(), new.function or FunctionInfo()
    changes = [c for c in _code_changes(view, fa, fb) if c.qualname.startswith(f"{name}.")]
    what = [f"{v} changed" for c in changes for v in c.values]
    what += [f"the code of {c.name} changed" for c in changes if c.lines]
    if not what:
        return ""
    return f" (in {os.path.basename(changes[0].file or name)}: {', '.join(dict.fromkeys(what))})"


def _summary_node(
    view: StepGraph, rec: StepRecord, argument: str, path: tuple[str, ...]
) -> tuple[HashNode, HashNode] | None:
    """The recorded summary of `argument` (`rec`'s, or that of the computation it reused) and its
    node at `path`, when there is one."""
    from cachetool.fingerprint.tree import as_node, node_at

    arg = view.with_summaries(rec).arg(argument)
    tree = as_node(arg.summary) if arg is not None and arg.summary is not None else None
    node = node_at(tree, path) if tree is not None else None
    return (tree, node) if tree is not None and node is not None else None


def _summary_stops_at(view: StepGraph, rec: StepRecord, argument: str, path: tuple[str, ...]) -> bool:
    """Whether the recorded summary of `argument` stops at `path`: what differs lies below it."""
    got = _summary_node(view, rec, argument, path)
    return got is not None and "x" in got[1]


def _cache_state(
    view: StepGraph, new: StepRecord, old: StepRecord, argument: str, path: tuple[str, ...]
) -> Reason | None:
    """The part of `argument` at `path` is an object an earlier step of both runs hashes too (the
    same fingerprint in each), which that step computed in one run and loaded from the cache in
    the other: the computing run changed it while it ran, and this step hashed it again
    (check-determinism's cache-state cause). None otherwise. The object is recognised as
    check-determinism recognises it (`part_key`), in this step's tree of either run."""
    from cachetool.fingerprint.diff import render_path, state_change_hint
    from cachetool.fingerprint.tree import as_node, part_key, part_keys, types_on_path

    if new.run == old.run:
        return None
    nodes = [got for rec in (new, old) if (got := _summary_node(view, rec, argument, path))]
    keys = {part_key(path[-1] if path else "", node, len(path)) for _, node in nodes} - {None}
    if not keys:
        return None
    before = {
        run: {r.result: r for r in view.steps if r.run == run and r.seq < rec.seq and r.result}
        for run, rec in ((new.run, new), (old.run, old))
    }
    for fp, in_new in before[new.run].items():
        in_old = before[old.run].get(fp)
        if in_old is None or in_new.computed == in_old.computed:
            continue
        earlier = in_new if in_new.computed else in_old
        trees = [as_node(a.summary) for a in view.with_summaries(earlier).args.values() if a.summary]
        if not any(keys & part_keys(t) for t in trees):
            continue
        shown = render_path(argument, path)
        message = (
            f"`{shown}` differs between a run that computed {StepRef.of(earlier).label} and one that loaded "
            "it from the cache: that step changes it while it runs, and this step hashes it again — not a "
            "change of yours"
        )
        hint = state_change_hint(types_on_path(nodes[0][0], path))
        return Reason("cache-state", message, argument, shown, hint=hint)
    return None


def _changed(argument: str, path: str, before: str, after: str) -> Reason:
    """`path` (a part of `argument`) has another value."""
    return Reason("argument", f"`{path}` changed {before} → {after}", argument, path, before, after)


def _nondeterministic(
    argument: str, path: str, description: str | None, hint: str | None, kind: str | None = None
) -> Reason:
    """`path` hashes differently from run to run by itself: how, by the culprit's `kind`."""
    what = f"`{path}` ({description})" if description else f"`{path}`"
    varies = _VARIES.get(kind or "", "pickles differently in every process")
    message = f"{what} {varies} — not a change of yours; run `cachetool check-determinism` on the script"
    return Reason("nondeterministic", message, argument=argument, path=path, hint=hint)


def _function_reasons(view: StepGraph, new: StepRecord, old: StepRecord) -> list[Reason]:
    fa, fb = old.function or FunctionInfo(), new.function or FunctionInfo()
    if fa.qualname != fb.qualname:
        message = f"another function: {fa.qualname} → {fb.qualname}"
        return [Reason("function", message, "function", None, fa.qualname, fb.qualname)]
    code_a, code_b = fa.code_hash, fb.code_hash
    file_a, file_b = (os.path.basename(f.file or "") for f in (fa, fb))
    if code_a and code_a == code_b and file_a != file_b and fb.qualname != "<lambda>":
        message = (
            f"the function `{fb.qualname}` is the same but its source file changed ({file_a} → {file_b}), "
            "which datasets hashes (a function's code keeps its file name)"
        )
        hint = "run the script under one name, or define the function in a module both scripts import"
        return [Reason("source-file", message, "function", "function", file_a, file_b, hint=hint)]
    changed = code_a != code_b if code_a and code_b else fa.source_hash != fb.source_hash
    if changed:
        lines = line_changes(view.sources, fa, fb)
        where = f" ({lines[0]})" if lines else ""
        message = f"the source of `{fb.qualname}` changed{where}"
        return [Reason("function-source", message, argument="function", path="function", lines=tuple(lines))]
    return _same_code_reasons(view, new, old, fb.qualname)


def _same_code_reasons(
    view: StepGraph, new: StepRecord, old: StepRecord, qualname: str | None
) -> list[Reason]:
    """The function's code is the same, yet it hashes differently: the part of its hash tree
    that differs, or what varies from process to process."""
    found = _culprit_reasons(view, new, old, "function")
    if found is not None:
        return found
    hint = "its source is unchanged, yet it hashes differently: something it references is built at run time"
    return [_nondeterministic("function", "function", f"function {qualname!r}", hint)]


def _on_other_host(other: StepRecord, rec: StepRecord) -> str:
    """` on node-3` when `other` ran on another host than `rec` (a shared cache), else ""."""
    return f" on {other.host}" if other.host and rec.host and other.host != rec.host else ""


def _removed_between(view: StepGraph, fp: str | None, after: float, before: float) -> GcRecord | None:
    """The latest gc record of this root that removed `fp`'s files between two of its steps."""
    if fp is None:
        return None
    found = [g for g in view.ledger.gc_records() if fp in g.fingerprints and after < g.time < before]
    return found[-1] if found else None


def concurrent_reason(rec: StepRecord, same: StepRecord) -> Reason:
    """`rec` computed a fingerprint another run was computing at the same time."""
    start, end = clock_time(same.time), clock_time(same.end)
    # Within one minute the clock says nothing twice: its length, as `stats` writes durations.
    when = f"at {start}, for {short_duration(same.duration)}" if start == end else f"from {start} to {end}"
    return Reason(
        "concurrent",
        f"another run{_on_other_host(same, rec)} was computing the same fingerprint at the "
        f"same time ({when}): neither could reuse the other's file",
    )


def same_fingerprint_reason(view: StepGraph, rec: StepRecord, same: StepRecord) -> Reason:
    """`rec` computed a fingerprint `same` had made before: its file was gone (gc says when)."""
    gone = "some of its num_proc shards were" if rec.cache == "partial" else "its cache file was"
    removal = _removed_between(view, rec.result, same.time, rec.time)
    why = (
        removal.said(clock_time(removal.time))
        if removal is not None
        else "gone (deleted, cleaned up, or load_from_cache_file=False)"
    )
    if rec.uncached is not None:  # datasets did not look for the file
        gone, why = "it ran without a persistent cache:", UNCACHED_TEXT.get(rec.uncached, rec.uncached)
    return Reason(
        "same-fingerprint",
        f"its fingerprint is not new (also made at {clock_time(same.time)}"
        f"{_on_other_host(same, rec)}); {gone} {why}",
    )
