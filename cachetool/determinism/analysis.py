"""Align the trace events of N runs and explain the first fingerprint that differs.

Pure functions over event lists (one list per run, as read from each run's events file): no
subprocess, no disk. The runner (`cachetool.determinism.runner`) feeds them.

Rules:

* events are aligned by order and call site (operation, transform, file, line); an event present in
  one run only is counted, not compared;
* a step whose fingerprint differs while its parents match is a **cause**; its differing arguments
  are diffed tree against tree to name the culprit;
* a step whose parent is a fingerprint that differed earlier belongs to that cause's **cascade**;
* a root (a source dataset) that differs, or a step whose differing parent no recorded step made,
  is a **source** difference: no argument differs, the input does;
* a step where `datasets` fell back to a random fingerprint (an argument that cannot be pickled) is
  a **random** cause: it differs in every process by construction; the unpicklable piece is named;
* a step that hashes an object an earlier step changed while it ran (a tokenizer the mapped
  function configured, a vocabulary built on the first call: the tracer records the argument's tree
  at hash time and, when it changed, at the end of the step) is a **cache-state** cause: its
  fingerprint depends on whether the earlier step was computed or loaded from the cache, even when
  every run compared here happened to agree.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cachetool.fingerprint.diff import (
    Culprit,
    Unpicklable,
    diff_trees,
    find_unpicklable_in_tree,
    state_change_hint,
)
from cachetool.fingerprint.tree import iter_nodes

__all__ = ["Cause", "Step", "align", "analyze"]

Event = Mapping[str, Any]
_SHARD = re.compile(r"^(.+)_\d{5}_of_\d{5}$")


@dataclass(frozen=True)
class Step:
    """One aligned event: the same call in every run."""

    index: int
    #: The position of this step's event in each run's event list.
    positions: tuple[int, ...]
    type: str
    operation: str
    transform: str
    file: str | None
    line: int | None
    function: str | None
    internal: bool
    results: tuple[str | None, ...]
    #: One tuple of parent fingerprints per run.
    parents: tuple[tuple[str, ...], ...]
    #: Where the function passed to the transform is defined (``file:line``), when recorded.
    function_defined: str | None = None
    #: ``same``, ``cause``, ``cascade`` or ``source`` / ``random`` (both causes too).
    status: str = "same"
    #: For a cascade step: the index of its cause in `Analysis.causes`.
    cause: int | None = None
    #: The split the step made (``train``), when the runs recorded one.
    split: str | None = None

    @property
    def differs(self) -> bool:
        return len(set(self.results)) > 1

    @property
    def location(self) -> str:
        if self.file is None:
            return "?"
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "type": self.type,
            "operation": self.operation,
            "transform": self.transform,
            "call_site": {"file": self.file, "line": self.line},
            "function": self.function,
            "function_defined": self.function_defined,
            "internal": self.internal,
            "fingerprints": list(self.results),
            "parents": [list(p) for p in self.parents],
            "status": self.status,
            "cause": self.cause,
            "split": self.split,
        }


@dataclass(frozen=True)
class Cause:
    """A fingerprint that differs between runs while its inputs do not (or a source that differs)."""

    step: Step
    #: ``arguments`` (a hashed argument differs), ``source`` (the input dataset differs),
    #: ``random`` (datasets used a random fingerprint), ``given`` (the caller passed a
    #: ``new_fingerprint=`` that differs), ``cache-state`` (an argument holds an object an earlier
    #: step changed while it ran: `changed_by`), ``unexplained`` (no recorded argument differs).
    kind: str
    differing_args: tuple[str, ...] = ()
    culprits: tuple[Culprit, ...] = ()
    unpicklable: tuple[Unpicklable, ...] = ()
    #: The exception text datasets swallowed, one per run that fell back (random causes).
    errors: tuple[str, ...] = ()
    #: Source causes: the recorded description of the source (builder, config, data dir, path)
    #: where it differs, as ``(key, (value per run, ...))``.
    source_diffs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    cascade: int = 0
    #: ``PYTHONHASHSEED`` (equal hash seeds give equal fingerprints), ``every run``, ``cache state``
    #: (computed or loaded from the cache upstream), or None (not checked).
    variation: str | None = None
    #: Cache-state causes: the earlier step that changed the object while it ran.
    changed_by: Step | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "step": self.step.index,
            "call_site": {"file": self.step.file, "line": self.step.line},
            "operation": self.step.operation,
            "transform": self.step.transform,
            "function": self.step.function,
            "fingerprints": list(self.step.results),
            "differing_arguments": list(self.differing_args),
            "culprits": [c.to_dict() for c in self.culprits],
            "unpicklable": [u.to_dict() for u in self.unpicklable],
            "errors": list(self.errors),
            "source_differences": {key: list(values) for key, values in self.source_diffs},
            "cascade": self.cascade,
            "variation": self.variation,
            "changed_by": None
            if self.changed_by is None
            else {
                "step": self.changed_by.index,
                "call_site": {"file": self.changed_by.file, "line": self.changed_by.line},
                "operation": self.changed_by.operation,
                "function": self.changed_by.function,
            },
        }


@dataclass(frozen=True)
class Analysis:
    """Everything compared: aligned steps, the causes in order, random fallbacks, unaligned events."""

    steps: tuple[Step, ...]
    causes: tuple[Cause, ...]
    #: Events of some run that have no counterpart in another run.
    unaligned: int = 0
    #: Of those, calls `datasets` made itself (`select`, `set_format` inside a step it computed):
    #: a cold run makes them where a warm one loads the result, on the same path.
    unaligned_internal: int = 0
    #: Random fallbacks on steps whose fingerprints all matched anyway.
    hidden_random: tuple[Cause, ...] = field(default_factory=tuple)
    #: Steps inside a cascade whose own arguments differ as well (hidden by an earlier cause).
    masked: tuple[Cause, ...] = field(default_factory=tuple)

    @property
    def deterministic_causes(self) -> tuple[Cause, ...]:
        """Causes that are real hashing differences (not random fallbacks)."""
        return tuple(c for c in self.causes if c.kind != "random")

    @property
    def random_causes(self) -> tuple[Cause, ...]:
        return tuple(c for c in self.causes if c.kind == "random") + self.hidden_random


def _key(event: Event) -> tuple[Any, ...]:
    site = event.get("call_site") or {}
    return (
        event.get("type"),
        event.get("operation"),
        event.get("transform"),
        site.get("file"),
        site.get("line"),
        bool(event.get("internal")),
    )


def align(runs: Sequence[Sequence[Event]]) -> tuple[list[tuple[int, ...]], int]:
    """Rows of event positions, one position per run, matched by order and call site; plus the
    number of events that could not be matched in every run."""
    if not runs:
        return [], 0
    base_keys = [_key(e) for e in runs[0]]
    maps: list[dict[int, int]] = []
    for other in runs[1:]:
        other_keys = [_key(e) for e in other]
        if other_keys == base_keys:  # the usual case: the runs took the same path
            maps.append(dict(enumerate(range(len(base_keys)))))
            continue
        matcher = difflib.SequenceMatcher(None, base_keys, other_keys, autojunk=False)
        mapping: dict[int, int] = {}
        for block in matcher.get_matching_blocks():
            for k in range(block.size):
                mapping[block.a + k] = block.b + k
        maps.append(mapping)
    rows = [(i, *(m[i] for m in maps)) for i in range(len(base_keys)) if all(i in m for m in maps)]
    unaligned = sum(len(r) for r in runs) - len(rows) * len(runs)
    return rows, unaligned


def _defined(event: Event) -> str | None:
    fn = event.get("function")
    if not isinstance(fn, Mapping) or not fn.get("file"):
        return None
    return f"{fn['file']}:{fn['line']}" if fn.get("line") is not None else str(fn["file"])


def _site(event: Event) -> tuple[str | None, int | None, str | None]:
    site = event.get("call_site") or {}
    fn = event.get("function") or {}
    return site.get("file"), site.get("line"), fn.get("qualname") if isinstance(fn, Mapping) else None


def analyze(runs: Sequence[Sequence[Event]]) -> Analysis:
    """Compare N runs' events (N >= 2): steps, causes with culprits, and their cascades."""
    positions, unaligned = align(runs)
    matched = [{row[k] for row in positions} for k in range(len(runs))]
    unaligned_internal = sum(
        1
        for k, run in enumerate(runs)
        for i, e in enumerate(run)
        if i not in matched[k] and e.get("internal")
    )
    rows = [[runs[k][i] for k, i in enumerate(row)] for row in positions]
    changes = _state_changes(runs, positions)
    steps: list[Step] = []
    causes: list[Cause] = []
    hidden_random: list[Cause] = []
    masked: list[Cause] = []
    masked_seen: set[tuple[Any, ...]] = set()
    # fingerprint (per run) -> index of the cause it descends from
    tainted: list[dict[str, int]] = [{} for _ in runs]
    deferred: list[int] = []
    for index, row in enumerate(rows):
        file, line, function = _site(row[0])
        results = tuple(e.get("result") for e in row)
        parents = tuple(tuple(e.get("parents") or ()) for e in row)
        step = Step(
            index=index,
            positions=positions[index],
            type=str(row[0].get("type") or "transform"),
            operation=str(row[0].get("operation") or ""),
            transform=str(row[0].get("transform") or ""),
            file=file,
            line=line,
            function=function,
            internal=bool(row[0].get("internal")),
            results=results,
            parents=parents,
            function_defined=_defined(row[0]),
            split=str(row[0]["split"]) if row[0].get("split") is not None else None,
        )
        fallbacks = [e.get("random_fallback") for e in row]
        change = changes.get(index)
        if not step.differs:
            if change is not None and not any(fallbacks):
                # Every run here agrees, but only because they all computed (or all loaded) the
                # step that changes the object: a run that differs upstream would not.
                step = _replace(step, status="cause", cause=len(causes))
                causes.append(_state_cause(step, row, change, steps))
            elif any(fallbacks):
                hidden_random.append(_random_cause(step, row))
            steps.append(step)
            continue
        inherited = None
        # A fingerprint already explained (the same dataset seen again, e.g. reloaded) is part of
        # that cascade, not a new cause.
        owners = {tainted[k].get(fp) for k, fp in enumerate(results) if fp is not None}
        if len(owners) == 1 and None not in owners:
            inherited = owners.pop()
        for k, run_parents in enumerate(parents):
            if inherited is not None:
                break
            for p in run_parents:
                owner = tainted[k].get(p)
                if owner is None:
                    # num_proc shards are named after the map's fingerprint: <fp>_00000_of_00002.
                    shard = _SHARD.match(p) if isinstance(p, str) else None
                    owner = tainted[k].get(shard.group(1)) if shard else None
                if owner is not None:
                    inherited = owner
                    break
            if inherited is not None:
                break
        if inherited is not None:
            step = _replace(step, status="cascade", cause=inherited)
            origin = causes[inherited].step
            if any(fallbacks) and (step.file, step.line) != (origin.file, origin.line):
                # Still a transform datasets cannot hash: its cache would never be reused.
                hidden_random.append(_random_cause(step, row))
            if (
                not step.internal
                and results[0] is not None
                and results[0] != causes[inherited].step.results[0]
            ):
                # A step of the cascade whose own arguments differ too: a second problem that would
                # show up once the first is fixed.
                own = _arg_diffs(row, skip_datasets=True)
                key = (
                    step.file,
                    step.line,
                    tuple(c.path_str for c in own["culprits"]),
                    own["differing_args"],
                )
                if own["differing_args"] and key not in masked_seen:
                    # Once per call site and culprit (DatasetDict.map repeats it for every split).
                    masked_seen.add(key)
                    masked.append(Cause(step=step, kind="arguments", **own))
            cause_index = inherited
        elif step.internal and any(
            not other[0].get("internal") and tuple(e.get("result") for e in other) == results
            for j, other in enumerate(rows)
            if j != index
        ):
            # datasets' own step (`select(..., new_fingerprint=)` inside train_test_split) made the
            # fingerprint of a call the user made: that call is the cause, never this step.
            step = _replace(step, status="cascade")
            deferred.append(index)
            steps.append(step)
            continue
        else:
            cause_index = len(causes)
            if any(fallbacks):
                cause = _random_cause(step, row)
                step = _replace(step, status="random", cause=cause_index)
            elif len(set(parents)) > 1 or step.type == "root":
                cause = Cause(step=step, kind="source", source_diffs=_source_diffs(row), **_arg_diffs(row))
                step = _replace(step, status="source", cause=cause_index)
            elif change is not None:
                cause = _state_cause(step, row, change, steps)
                step = _replace(step, status="cause", cause=cause_index)
            elif any(e.get("fingerprint_given") for e in row):
                cause = Cause(step=step, kind="given")
                step = _replace(step, status="cause", cause=cause_index)
            else:
                diffs = _arg_diffs(row)
                kind = "arguments" if diffs["differing_args"] else "unexplained"
                cause = Cause(step=step, kind=kind, **diffs)
                step = _replace(step, status="cause", cause=cause_index)
            repeated = next((i for i, c in enumerate(causes) if _same_story(c, cause)), None)
            if repeated is not None:
                # The same call and culprit again (the other split of a DatasetDict.map, the test
                # output of train_test_split): part of the first, not a cause of its own.
                cause_index = repeated
                step = _replace(step, status="cascade", cause=repeated)
            else:
                causes.append(_replace_cause(cause, step=step))
        if step.differs:
            for k, fp in enumerate(results):
                if fp is not None:
                    tainted[k][fp] = cause_index
        steps.append(step)
    for index in deferred:
        twin = next(
            (
                s
                for s in steps
                if not s.internal and s.results == steps[index].results and s.cause is not None
            ),
            None,
        )
        steps[index] = _replace(steps[index], cause=twin.cause if twin is not None else None)
    # Downstream of a cause: the steps the user made whose fingerprint differs because of it, so
    # that "N differ" = causes + downstream (+ random fallbacks).
    downstream = [
        sum(1 for s in steps if s.status == "cascade" and s.cause == i and s.differs and not s.internal)
        for i in range(len(causes))
    ]
    final = tuple(_replace_cause(c, cascade=downstream[i]) for i, c in enumerate(causes))
    return Analysis(
        steps=tuple(steps),
        causes=final,
        unaligned=unaligned,
        unaligned_internal=unaligned_internal,
        hidden_random=tuple(hidden_random),
        masked=tuple(masked),
    )


def _same_story(a: Cause, b: Cause) -> bool:
    """Two causes at one call site with the same kind, arguments and culprits (one call made twice)."""
    return (
        (a.step.file, a.step.line, a.step.operation, a.kind, a.differing_args)
        == (b.step.file, b.step.line, b.step.operation, b.kind, b.differing_args)
        and [c.path_str for c in a.culprits] == [c.path_str for c in b.culprits]
        and a.kind not in ("source", "unexplained")
    )


def _replace(step: Step, **changes: Any) -> Step:
    return replace(step, **changes)


def _replace_cause(cause: Cause, **changes: Any) -> Cause:
    return replace(cause, **changes)


def _arg_diffs(row: Sequence[Event], *, skip_datasets: bool = False) -> dict[str, Any]:
    """The arguments whose digests differ between runs, and the culprit inside each. With
    `skip_datasets`, arguments that are datasets (their digest follows upstream fingerprints)
    are left out."""
    names: list[str] = []
    for event in row:
        for name in event.get("args") or {}:
            if name not in names:
                names.append(name)
    differing: list[str] = []
    culprits: list[Culprit] = []
    for name in sorted(names):
        entries = [(e.get("args") or {}).get(name) for e in row]
        digests = [en.get("digest") if isinstance(en, Mapping) else None for en in entries]
        if len(set(digests)) == 1 and (digests[0] is not None or all(en is not None for en in entries)):
            # Equal digests, or an argument recorded without a digest in every run (not hashed).
            continue
        trees = [en.get("tree") if isinstance(en, Mapping) else None for en in entries]
        if skip_datasets and any(
            isinstance(t, Mapping) and str(t.get("t", "")).startswith("datasets.") for t in trees
        ):
            continue
        differing.append(name)
        if all(t is not None for t in trees):
            culprit = diff_trees(name, trees)
            if culprit is not None:
                culprits.append(culprit)
    return {"differing_args": tuple(differing), "culprits": tuple(culprits)}


@dataclass(frozen=True)
class _Change:
    """An object a step changed while it ran (`changed_at`, a step index), hashed again later."""

    changed_at: int
    culprit: Culprit


_SCALAR_TYPES = frozenset({"str", "bytes", "int", "float", "bool", "NoneType", "complex"})


def _node_key(label: str, node: Mapping[str, Any], depth: int) -> tuple[str, ...] | None:
    """How a changed part is recognised in a later tree: an object or container by its digest
    (distinctive), a scalar only as a named variable (``global 'n'``, ``closure 'k'``) with its
    value's digest, so that an unrelated ``True`` or ``None`` elsewhere is not taken for it."""
    digest = node.get("d")
    if not isinstance(digest, str):
        return None
    if str(node.get("t", "")) not in _SCALAR_TYPES:
        return (digest,)
    if depth >= 1 and label.startswith(("global ", "closure ", "[")):
        return (label, digest)
    return None


def _state_changes(
    runs: Sequence[Sequence[Event]], positions: Sequence[tuple[int, ...]]
) -> dict[int, _Change]:
    """Steps (by index) whose arguments hold a part that an earlier step of the same run changed
    while it ran (the tracer records an argument's tree after a step that ran when its digest
    changed: ``"after"``), with what changed, diffed before against after."""
    step_of = [{pos[k]: index for index, pos in enumerate(positions)} for k in range(len(runs))]
    out: dict[int, _Change] = {}
    for k, events in enumerate(runs):
        # part key -> (position of the step that changed it, culprit)
        changed: dict[tuple[str, ...], tuple[int, Culprit]] = {}
        reported: set[tuple[int, tuple[str, ...]]] = set()
        for pos, event in enumerate(events):
            args = event.get("args") or {}
            if changed and pos in step_of[k] and step_of[k][pos] not in out:
                found = _hashed_again(args, changed)
                if found is not None:
                    at, what = found
                    seen = (at, what.path)
                    if seen not in reported and at in step_of[k]:
                        # The first step that hashes it again is the one to fix.
                        reported.add(seen)
                        out[step_of[k][pos]] = _Change(changed_at=step_of[k][at], culprit=what)
            for name, entry in args.items():
                if not isinstance(entry, Mapping):
                    continue
                before, after = entry.get("tree"), entry.get("after")
                if not isinstance(before, Mapping) or not isinstance(after, Mapping):
                    continue
                diff = diff_trees(str(name), [dict(before), dict(after)])
                if diff is None:
                    continue
                paths = list(diff.leaves) or [diff.path]
                types = " ".join(
                    str((_node_at(after, leaf[:d]) or {}).get("t", ""))
                    for leaf in paths
                    for d in range(len(leaf) + 1)
                )
                culprit = _as_state_change(diff, types)
                for leaf in paths:
                    for depth in range(len(leaf) + 1):
                        node = _node_at(after, leaf[:depth])
                        label = leaf[depth - 1] if depth else ""
                        key = _node_key(label, node, depth) if node is not None else None
                        if key is not None:
                            changed[key] = (pos, culprit)
    return out


def _hashed_again(
    args: Mapping[str, Any], changed: Mapping[tuple[str, ...], tuple[int, Culprit]]
) -> tuple[int, Culprit] | None:
    for entry in args.values():
        tree = entry.get("tree") if isinstance(entry, Mapping) else None
        if not isinstance(tree, Mapping):
            continue
        for path, node in iter_nodes(dict(tree)):
            key = _node_key(path[-1] if path else "", node, len(path))
            if key is not None and key in changed:
                return changed[key]
    return None


def _node_at(tree: Mapping[str, Any], path: Sequence[str]) -> Mapping[str, Any] | None:
    node = tree
    for label in path:
        for child in node.get("c", ()):
            if child.get("l") == label:
                node = child
                break
        else:
            return None
    return node


def _as_state_change(culprit: Culprit, types: str) -> Culprit:
    hint = state_change_hint(types)
    parts = tuple(replace(p, kind="cache-state", hint=hint) for p in culprit.parts)
    return replace(culprit, kind="cache-state", hint=hint, parts=parts)


def _state_cause(step: Step, row: Sequence[Event], change: _Change, steps: Sequence[Step]) -> Cause:
    diffs = _arg_diffs(row)
    return Cause(
        step=step,
        kind="cache-state",
        differing_args=diffs["differing_args"],
        culprits=(change.culprit,),
        variation="cache state",
        changed_by=steps[change.changed_at] if change.changed_at < len(steps) else None,
    )


def _random_cause(step: Step, row: Sequence[Event]) -> Cause:
    errors: list[str] = []
    found: list[Unpicklable] = []
    args: list[str] = []
    for event in row:
        fallback = event.get("random_fallback")
        if not fallback:
            continue
        errors.append(str(fallback.get("error") or ""))
        name = fallback.get("argument")
        if name is not None and name not in args:
            args.append(name)
    for name in args:
        entry = (row[0].get("args") or {}).get(name)
        tree = entry.get("tree") if isinstance(entry, Mapping) else None
        if tree is not None:
            piece = find_unpicklable_in_tree(name, tree, errors[0] if errors else None)
            if piece is not None:
                found.append(piece)
    return Cause(
        step=step,
        kind="random",
        differing_args=tuple(args),
        unpicklable=tuple(found),
        errors=tuple(dict.fromkeys(errors)),
    )


def _source_diffs(row: Sequence[Event]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Where the recorded descriptions of a source differ: ``(key, (value per run, ...))``, nested
    values flattened (``data_files[reviews.csv].mtime``) so that only what changed is shown."""
    flat: list[dict[str, str]] = []
    for event in row:
        source = event.get("source")
        out: dict[str, str] = {}
        _flatten(source if isinstance(source, Mapping) else {}, "", out)
        flat.append(out)
    keys: list[str] = []
    for f in flat:
        keys.extend(k for k in f if k not in keys)
    diffs = []
    for key in keys:
        values = tuple(f.get(key, "-") for f in flat)
        if len(set(values)) > 1:
            diffs.append((key, values))
    diffs.extend(_column_diffs(row))
    return tuple(diffs)


def _column_diffs(row: Sequence[Event]) -> list[tuple[str, tuple[str, ...]]]:
    """For a dataset built in memory: each column whose digest differs, with the first row whose
    value differs (``("column 'loaded_at' row 0", ("1795…", "1796…"))``)."""
    tables = [e.get("columns") for e in row]
    if not all(isinstance(t, Mapping) and t for t in tables):
        return []
    out: list[tuple[str, tuple[str, ...]]] = []
    first = tables[0]
    assert isinstance(first, Mapping)
    for name in first:
        columns = [t.get(name) if isinstance(t, Mapping) else None for t in tables]
        if not all(isinstance(c, Mapping) for c in columns):
            out.append((f"column {name!r}", tuple("present" if c else "absent" for c in columns)))
            continue
        if len({c.get("digest") for c in columns if isinstance(c, Mapping)}) == 1:
            continue
        heads = [list(c.get("head") or []) if isinstance(c, Mapping) else [] for c in columns]
        for i in range(max(len(h) for h in heads)):
            values = tuple(h[i] if i < len(h) else "-" for h in heads)
            if len(set(values)) > 1:
                out.append((f"column {name!r} row {i}", values))
                break
        else:
            out.append((f"column {name!r}", tuple(f"differs after row {len(h)}" for h in heads)))
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
