"""Objects a step changes while it runs, hashed again by a later step (cache-state causes).

The tracer records an argument's hash tree when `datasets` hashes it and, in a determinism run,
its tree at the end of a step that ran when its digest changed meanwhile (`ArgInfo.after`). A later
step whose arguments hold a changed part has a fingerprint that depends on whether the earlier
step was computed or loaded from the cache (datasets issues #3638, #5985, #3847).

Hash trees are `cachetool.fingerprint.tree.HashNode`s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cachetool.determinism.events import Event
from cachetool.fingerprint.diff import Culprit, diff_trees
from cachetool.fingerprint.hints import state_change_hint
from cachetool.fingerprint.tree import as_node, iter_nodes, node_at, part_key, types_on_path
from cachetool.history.records.parts import ArgInfo

__all__ = ["StateChange", "state_changes"]


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
    """The changed part a step's arguments hold: where it was changed, and what changed, named by
    its path in this step's argument (``fn_kwargs['tok'] → .padding``, not the path it had in
    the function of the step that changed it)."""
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
