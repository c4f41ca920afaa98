"""What makes one aligned step differ (pure functions over one row: the step's event in each run):
its arguments diffed tree against tree, the source it reads, the piece `datasets` could not pickle,
or an object an earlier step changed while it ran (`ArgInfo.after`: then a later step hashing it
depends on whether that step was computed or loaded; datasets #3638, #5985, #3847).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cachetool.determinism.events import Event
from cachetool.determinism.report import Cause, SourceDiff, Step
from cachetool.fingerprint.diff import (
    Culprit,
    Unpicklable,
    diff_trees,
    find_unpicklable_in_tree,
    reordered,
    state_change_hint,
)
from cachetool.fingerprint.tree import as_node, iter_nodes, node_at, part_key, types_on_path
from cachetool.history.records.parts import ArgInfo


@dataclass(frozen=True)
class ArgDiffs:
    """The arguments whose digests differ between runs, and the culprit found inside each."""

    differing_args: tuple[str, ...] = ()
    culprits: tuple[Culprit, ...] = ()


def _is_dataset(tree: Mapping[str, Any] | None) -> bool:
    return tree is not None and str(tree.get("t", "")).startswith("datasets.")


def arg_diffs(row: Sequence[Event], *, skip_datasets: bool = False) -> ArgDiffs:
    """The arguments whose digests differ between runs, and the culprit inside each. With
    `skip_datasets`, arguments that are datasets (their digest follows upstream fingerprints)
    are left out."""
    names: list[str] = []
    for event in row:
        names.extend(name for name in event.args if name not in names)
    differing: list[str] = []
    culprits: list[Culprit] = []
    for name in sorted(names):
        entries: list[ArgInfo | None] = [event.arg(name) for event in row]
        digests = [en.digest if en is not None else None for en in entries]
        if len(set(digests)) == 1 and (digests[0] is not None or all(en is not None for en in entries)):
            # Equal digests, or an argument recorded without a digest in every run (not hashed).
            continue
        trees = [en.tree if en is not None else None for en in entries]
        if skip_datasets and any(_is_dataset(t) for t in trees):
            continue
        differing.append(name)
        if all(t is not None for t in trees):
            culprit = diff_trees(name, [as_node(t) for t in trees if t is not None])
            if culprit is not None:
                culprits.append(culprit)
    return ArgDiffs(tuple(differing), tuple(culprits))


def state_cause(step: Step, row: Sequence[Event], change: StateChange, steps: Sequence[Step]) -> Cause:
    """A step that hashes an object an earlier step changed while it ran."""
    return Cause(
        step=step,
        kind="cache-state",
        differing_args=arg_diffs(row).differing_args,
        culprits=(change.culprit,),
        variation="cache state",
        changed_by=steps[change.changed_at] if change.changed_at < len(steps) else None,
    )


def random_cause(step: Step, row: Sequence[Event]) -> Cause:
    """A step where `datasets` fell back to a random fingerprint, with the unpicklable piece."""
    errors: list[str] = []
    args: list[str] = []
    for event in row:
        fallback = event.random_fallback
        if fallback is None:
            continue
        errors.append(fallback.error or "")
        if fallback.argument is not None and fallback.argument not in args:
            args.append(fallback.argument)
    found: list[Unpicklable] = []
    for name in args:
        entry = row[0].arg(name)
        if entry is not None and entry.tree is not None:
            piece = find_unpicklable_in_tree(name, as_node(entry.tree), errors[0] if errors else None)
            if piece is not None:
                found.append(piece)
    return Cause(
        step=step,
        kind="random",
        differing_args=tuple(args),
        unpicklable=tuple(found),
        errors=tuple(dict.fromkeys(errors)),
    )


def source_cause(step: Step, row: Sequence[Event], names: Mapping[str, str] | None = None) -> Cause:
    """A source (a root, or a step whose parents differ) that differs: where its descriptions
    differ, column by column for a dataset built in memory, and any argument that differs too.
    When the runs give it the same inputs in another order (data files, the datasets it
    concatenates: named by `names`, fingerprint -> what made it), that order is the difference."""
    columns = _column_diffs(row)
    diffs = arg_diffs(row)
    orders = _order_diffs(row, names or {})
    source_diffs = _source_diffs(row)
    if orders:  # the builder folder's name is the hash of that order: not a difference of its own
        source_diffs = [d for d in source_diffs if d.key != "relative_data_dir"]
    return Cause(
        step=step,
        kind="source",
        source_diffs=(*orders, *source_diffs, *columns),
        columns_differ=bool(columns),
        differing_args=diffs.differing_args,
        culprits=diffs.culprits,
    )


def _order_diffs(row: Sequence[Event], names: Mapping[str, str]) -> list[SourceDiff]:
    """The same data files, or the same parent datasets, in another order in each run."""
    out = []
    files = [[os.path.basename(f.path) for f in e.source.data_files] if e.source else [] for e in row]
    if reordered(files):
        out.append(SourceDiff("data_files order", tuple(", ".join(f) for f in files)))
    parents = [list(e.parents) for e in row]
    if reordered(parents):
        shown = tuple(", ".join(names.get(p, p[:8]) for p in ps) for ps in parents)
        out.append(SourceDiff("inputs order", shown))
    return out


def same_story(a: Cause, b: Cause) -> bool:
    """Two causes at one call site with the same kind, arguments and culprits (one call made twice)."""
    same = (a.step.file, a.step.line, a.step.operation, a.kind, a.differing_args) == (
        b.step.file,
        b.step.line,
        b.step.operation,
        b.kind,
        b.differing_args,
    ) and [c.path_str for c in a.culprits] == [c.path_str for c in b.culprits]
    if a.kind == "source":  # the splits of one load_dataset call: the same inputs reordered
        return same and bool(a.source_diffs) and a.source_diffs == b.source_diffs
    return same and a.kind != "unexplained"


def _source_diffs(row: Sequence[Event]) -> list[SourceDiff]:
    """Where the recorded descriptions of a source differ: ``(key, (value per run, ...))``, nested
    values flattened (``data_files[reviews.csv].mtime``) so that only what changed is shown."""
    flat: list[dict[str, str]] = []
    for event in row:
        out: dict[str, str] = {}
        _flatten(event.source.to_json() if event.source is not None else {}, "", out)
        flat.append(out)
    keys: list[str] = []
    for f in flat:
        keys.extend(k for k in f if k not in keys)
    diffs = []
    for key in keys:
        values = tuple(f.get(key, "-") for f in flat)
        if len(set(values)) > 1:
            diffs.append(SourceDiff(key, values))
    return diffs


def _column_diffs(row: Sequence[Event]) -> list[SourceDiff]:
    """For a dataset built in memory: each column whose digest differs, with the first row whose
    value differs (``("column 'loaded_at' row 0", ("1795…", "1796…"))``)."""
    tables = [event.columns for event in row]
    if not all(tables):
        return []
    out: list[SourceDiff] = []
    for name in tables[0]:
        columns = [t.get(name) for t in tables]
        present = [c for c in columns if c is not None]
        if len(present) < len(columns):
            out.append(SourceDiff(f"column {name!r}", tuple("present" if c else "absent" for c in columns)))
            continue
        if len({c.digest for c in present}) == 1:
            continue
        heads = [c.head for c in present]
        for i in range(max(len(h) for h in heads)):
            values = tuple(h[i] if i < len(h) else "-" for h in heads)
            if len(set(values)) > 1:
                out.append(SourceDiff(f"column {name!r} row {i}", values))
                break
        else:
            out.append(SourceDiff(f"column {name!r}", tuple(f"differs after row {len(h)}" for h in heads)))
    return out


def _flatten(value: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) and "path" in v for v in value):
        # Files: keyed by their name, so an added or removed file shows as such.
        for v in value:
            name = str(v["path"]).rsplit("/", 1)[-1]
            _flatten({k: x for k, x in v.items() if k != "path"}, f"{prefix}[{name}]", out)
    else:
        out[prefix] = str(value)


@dataclass(frozen=True)
class StateChange:
    """An object a step changed while it ran (`changed_at`, a step index), hashed again later."""

    changed_at: int
    culprit: Culprit


#: A changed part, as recognised in a later tree.
_PartKey = tuple[str, ...]
#: Where a step changed a part: its position, what changed, and the part's path in that step's argument.
_Changed = tuple[int, Culprit, tuple[str, ...]]


def state_changes(
    runs: Sequence[Sequence[Event]], positions: Sequence[tuple[int, ...]]
) -> dict[int, StateChange]:
    """Steps (by index) whose arguments hold a part that an earlier step of the same run changed
    while it ran, with what changed, diffed before against after."""
    step_of = [{pos[k]: index for index, pos in enumerate(positions)} for k in range(len(runs))]
    out: dict[int, StateChange] = {}
    for k, events in enumerate(runs):
        changed: dict[_PartKey, _Changed] = {}  # part -> (position of the step, culprit, part's path)
        reported: set[tuple[int, tuple[str, ...]]] = set()
        for pos, event in enumerate(events):
            if changed and pos in step_of[k] and step_of[k][pos] not in out:
                found = _hashed_again(event.args, changed)
                if found is not None:
                    at, what = found
                    seen = (at, what.path)
                    if seen not in reported and at in step_of[k]:
                        # The first step that hashes it again is the one to fix.
                        reported.add(seen)
                        out[step_of[k][pos]] = StateChange(changed_at=step_of[k][at], culprit=what)
            for name, entry in event.args.items():
                _note_changed(name, entry, pos, changed)
    return out


def _note_changed(name: str, entry: ArgInfo, pos: int, changed: dict[_PartKey, _Changed]) -> None:
    """Record the parts of argument `name` that the step at `pos` changed while it ran."""
    if entry.tree is None or entry.after is None:
        return
    after = as_node(entry.after)
    diff = diff_trees(name, [as_node(entry.tree), after])
    if diff is None:
        return
    paths = list(diff.leaves) or [diff.path]
    culprit = _as_state_change(diff, " ".join(types_on_path(after, leaf) for leaf in paths))
    for leaf in paths:
        for depth in range(len(leaf) + 1):
            node = node_at(after, leaf[:depth])
            label = leaf[depth - 1] if depth else ""
            key = part_key(label, node, depth) if node is not None else None
            if key is not None:
                changed[key] = (pos, culprit, leaf[:depth])


def _hashed_again(
    args: Mapping[str, ArgInfo], changed: Mapping[_PartKey, _Changed]
) -> tuple[int, Culprit] | None:
    """The changed part a step's arguments hold, named by its path in this step's argument
    (``fn_kwargs['tok'] → .padding``)."""
    for name, entry in args.items():
        if entry.tree is None:
            continue
        for path, node in iter_nodes(as_node(entry.tree)):
            key = part_key(path[-1] if path else "", node, len(path))
            if key is not None and key in changed:
                at, culprit, prefix = changed[key]
                return at, _rerooted(culprit, prefix, name, path)
    return None


def _rerooted(culprit: Culprit, prefix: tuple[str, ...], name: str, path: tuple[str, ...]) -> Culprit:
    """`culprit` with the paths below `prefix` moved below `path` of argument `name` (unchanged
    when a path of it is not below `prefix`)."""
    paths = [culprit.path, *culprit.leaves, *(p.path for p in culprit.parts)]
    if not all(p[: len(prefix)] == prefix for p in paths):
        return culprit

    def move(p: tuple[str, ...]) -> tuple[str, ...]:
        return (*path, *p[len(prefix) :])

    parts = tuple(replace(p, argument=name, path=move(p.path)) for p in culprit.parts)
    leaves = tuple(move(leaf) for leaf in culprit.leaves)
    return replace(culprit, argument=name, path=move(culprit.path), leaves=leaves, parts=parts)


def _as_state_change(culprit: Culprit, types: str) -> Culprit:
    hint = state_change_hint(types)
    parts = tuple(replace(p, kind="cache-state", hint=hint) for p in culprit.parts)
    return replace(culprit, kind="cache-state", hint=hint, parts=parts)
