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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from cachetool.determinism.causes import arg_diffs, random_cause, same_story, source_cause, state_cause
from cachetool.determinism.events import Event, as_runs
from cachetool.determinism.model import Analysis, Cause, CauseKind, Step, StepStatus
from cachetool.determinism.state import StateChange, state_changes

__all__ = ["Analysis", "Cause", "Step", "align", "analyze"]

_SHARD = re.compile(r"^(.+)_\d{5}_of_\d{5}$")

#: How events are matched across runs: by order and call site.
_Key = tuple[str, str | None, str | None, str | None, int | None, bool]


def _key(event: Event) -> _Key:
    site = event.call_site
    return (
        event.type,
        event.operation,
        event.transform,
        site.file if site is not None else None,
        site.line if site is not None else None,
        event.internal,
    )


def align(runs: Sequence[Iterable[Event | Mapping[str, Any]]]) -> tuple[list[tuple[int, ...]], int]:
    """Rows of event positions, one position per run, matched by order and call site; plus the
    number of events that could not be matched in every run."""
    events = as_runs(runs)
    if not events:
        return [], 0
    base_keys = [_key(e) for e in events[0]]
    maps: list[dict[int, int]] = []
    for other in events[1:]:
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
    unaligned = sum(len(r) for r in events) - len(rows) * len(events)
    return rows, unaligned


def _step(index: int, positions: tuple[int, ...], row: Sequence[Event]) -> Step:
    first = row[0]
    site, fn = first.call_site, first.function
    return Step(
        index=index,
        positions=positions,
        type=first.type or "transform",
        operation=first.operation or "",
        transform=first.transform or "",
        file=site.file if site is not None else None,
        line=site.line if site is not None else None,
        function=fn.qualname if fn is not None else None,
        internal=first.internal,
        results=tuple(e.result for e in row),
        parents=tuple(e.parents for e in row),
        function_file=fn.file if fn is not None else None,
        function_line=fn.line if fn is not None and fn.file else None,
        split=first.split,
    )


def analyze(runs: Sequence[Iterable[Event | Mapping[str, Any]]]) -> Analysis:
    """Compare N runs' events (N >= 2): steps, causes with culprits, and their cascades. Events are
    records (`read_events`) or the JSON objects of an events file, parsed once here."""
    events = as_runs(runs)
    positions, unaligned = align(events)
    matched = [{row[k] for row in positions} for k in range(len(events))]
    unaligned_internal = sum(
        1 for k, run in enumerate(events) for i, e in enumerate(run) if i not in matched[k] and e.internal
    )
    rows = [[events[k][i] for k, i in enumerate(row)] for row in positions]
    comparison = _Comparison(len(events), rows, state_changes(events, positions))
    for index, row in enumerate(rows):
        comparison.add(_step(index, positions[index], row), row)
    return comparison.result(unaligned, unaligned_internal)


class _Comparison:
    """The steps walked in order: each differing fingerprint is a new cause or part of the cascade
    of an earlier one (its parent, or the fingerprint itself, descends from that cause)."""

    def __init__(
        self, runs: int, rows: Sequence[Sequence[Event]], changes: Mapping[int, StateChange]
    ) -> None:
        self.rows = rows
        self.changes = changes
        self.steps: list[Step] = []
        self.causes: list[Cause] = []
        self.hidden_random: list[Cause] = []
        self.masked: list[Cause] = []
        self.masked_seen: set[tuple[Any, ...]] = set()
        #: Per run: fingerprint -> index of the cause it descends from.
        self.tainted: list[dict[str, int]] = [{} for _ in range(runs)]
        #: Internal steps that repeat the fingerprint of a call the user made (resolved at the end).
        self.deferred: list[int] = []

    def add(self, step: Step, row: Sequence[Event]) -> None:
        fallback = any(e.random_fallback is not None for e in row)
        if not step.differs:
            self.steps.append(self._agreeing(step, row, fallback))
            return
        inherited = self._inherited(step)
        if inherited is not None:
            step = self._in_cascade(step, row, inherited, fallback)
            cause_index = inherited
        elif step.internal and self._made_by_user_call(step):
            # datasets' own step (`select(..., new_fingerprint=)` inside train_test_split) made the
            # fingerprint of a call the user made: that call is the cause, never this step.
            self.deferred.append(step.index)
            self.steps.append(replace(step, status="cascade"))
            return
        else:
            step, cause_index = self._new_cause(step, row, fallback)
        for k, fp in enumerate(step.results):
            if fp is not None:
                self.tainted[k][fp] = cause_index
        self.steps.append(step)

    def _agreeing(self, step: Step, row: Sequence[Event], fallback: bool) -> Step:
        change = self.changes.get(step.index)
        if change is not None and not fallback:
            # Every run here agrees, but only because they all computed (or all loaded) the step
            # that changes the object: a run that differs upstream would not.
            step = replace(step, status="cause", cause=len(self.causes))
            self.causes.append(state_cause(step, row, change, self.steps))
        elif fallback:
            self.hidden_random.append(random_cause(step, row))
        return step

    def _inherited(self, step: Step) -> int | None:
        """The cause this step's fingerprint or one of its parents descends from, if any."""
        # A fingerprint already explained (the same dataset seen again, e.g. reloaded) is part of
        # that cascade, not a new cause.
        owners = {self.tainted[k].get(fp) for k, fp in enumerate(step.results) if fp is not None}
        if len(owners) == 1 and None not in owners:
            return owners.pop()
        for k, run_parents in enumerate(step.parents):
            for p in run_parents:
                owner = self.tainted[k].get(p)
                if owner is None:
                    # num_proc shards are named after the map's fingerprint: <fp>_00000_of_00002.
                    shard = _SHARD.match(p)
                    owner = self.tainted[k].get(shard.group(1)) if shard else None
                if owner is not None:
                    return owner
        return None

    def _in_cascade(self, step: Step, row: Sequence[Event], inherited: int, fallback: bool) -> Step:
        step = replace(step, status="cascade", cause=inherited)
        origin = self.causes[inherited].step
        if fallback and (step.file, step.line) != (origin.file, origin.line):
            # Still a transform datasets cannot hash: its cache would never be reused.
            self.hidden_random.append(random_cause(step, row))
        if not step.internal and step.results[0] is not None and step.results[0] != origin.results[0]:
            # A step of the cascade whose own arguments differ too: a second problem that would
            # show up once the first is fixed.
            own = arg_diffs(row, skip_datasets=True)
            key = (step.file, step.line, tuple(c.path_str for c in own.culprits), own.differing_args)
            if own.differing_args and key not in self.masked_seen:
                # Once per call site and culprit (DatasetDict.map repeats it for every split).
                self.masked_seen.add(key)
                self.masked.append(
                    Cause(
                        step=step, kind="arguments", differing_args=own.differing_args, culprits=own.culprits
                    )
                )
        return step

    def _made_by_user_call(self, step: Step) -> bool:
        return any(
            not other[0].internal and tuple(e.result for e in other) == step.results
            for j, other in enumerate(self.rows)
            if j != step.index
        )

    def _new_cause(self, step: Step, row: Sequence[Event], fallback: bool) -> tuple[Step, int]:
        """The cause this step is, unless it repeats an earlier one (then part of its cascade)."""
        cause_index = len(self.causes)
        status: StepStatus = "cause"
        change = self.changes.get(step.index)
        if fallback:
            cause, status = random_cause(step, row), "random"
        elif len(set(step.parents)) > 1 or step.type == "root":
            cause, status = source_cause(step, row), "source"
        elif change is not None:
            cause = state_cause(step, row, change, self.steps)
        elif any(e.fingerprint_given for e in row):
            cause = Cause(step=step, kind="given")
        else:
            diffs = arg_diffs(row)
            kind: CauseKind = "arguments" if diffs.differing_args else "unexplained"
            cause = Cause(step=step, kind=kind, differing_args=diffs.differing_args, culprits=diffs.culprits)
        repeated = next((i for i, c in enumerate(self.causes) if same_story(c, cause)), None)
        if repeated is not None:
            # The same call and culprit again (the other split of a DatasetDict.map, the test
            # output of train_test_split): part of the first, not a cause of its own.
            return replace(step, status="cascade", cause=repeated), repeated
        step = replace(step, status=status, cause=cause_index)
        self.causes.append(replace(cause, step=step))
        return step, cause_index

    def result(self, unaligned: int, unaligned_internal: int) -> Analysis:
        steps = self.steps
        for index in self.deferred:
            twin = next(
                (
                    s
                    for s in steps
                    if not s.internal and s.results == steps[index].results and s.cause is not None
                ),
                None,
            )
            steps[index] = replace(steps[index], cause=twin.cause if twin is not None else None)
        # Downstream of a cause: the steps the user made whose fingerprint differs because of it, so
        # that "N differ" = causes + downstream (+ random fallbacks).
        downstream = [
            sum(1 for s in steps if s.status == "cascade" and s.cause == i and s.differs and not s.internal)
            for i in range(len(self.causes))
        ]
        return Analysis(
            steps=tuple(steps),
            causes=tuple(replace(c, cascade=downstream[i]) for i, c in enumerate(self.causes)),
            unaligned=unaligned,
            unaligned_internal=unaligned_internal,
            hidden_random=tuple(self.hidden_random),
            masked=tuple(self.masked),
        )
