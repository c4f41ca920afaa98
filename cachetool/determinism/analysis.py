"""Align the trace events of N runs and explain the first fingerprint that differs.

Pure functions over event lists (one list per run, as read from each run's events file): no
subprocess, no disk. `cachetool.determinism.check` feeds them.

Rules:

* events are aligned by identity, never by order: the call site (operation, transform, file, line)
  and the lineage of the step (the steps that made its parents), so that a warm run's fewer
  internal events never shift a step and one split's step is never compared with another's; an
  event present in some runs only is named, not compared;
* a step whose fingerprint differs while its parents match is a **cause**; its differing arguments
  are diffed tree against tree to name the culprit;
* a step whose parent is a fingerprint that differed earlier belongs to that cause's **cascade**;
* a root (a source dataset) that differs, or a step whose differing parent no recorded step made,
  is a **source** difference: no argument differs, the input does;
* a step where `datasets` fell back to a random fingerprint (an argument that cannot be pickled) is
  a **random** cause: it differs in every process by construction; the unpicklable piece is named;
* a step whose fingerprint differs and that hashes an object an earlier step changed while it ran
  (a tokenizer the mapped function configured, a vocabulary built on the first call: the tracer
  records the argument's tree at hash time and, when it changed, at the end of the step) is a
  **cache-state** cause: a run that computed the earlier step and one that loaded it disagree;
* a cause is observed, never inferred: an internal step (one `datasets` made itself) is never a
  cause, and a step whose fingerprint matches in every run is none either. When every run computed
  the step that changed an object hashed later, and all agree, that they would agree with a run
  that loads it is not observed: it is noted (`Analysis.unobserved`), not a cause.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from cachetool.determinism.causes import (
    StateChange,
    arg_diffs,
    random_cause,
    same_story,
    source_cause,
    state_cause,
    state_changes,
)
from cachetool.determinism.events import Event, as_events
from cachetool.determinism.report import Analysis, Cause, CauseKind, Step, StepStatus, Unmatched

__all__ = ["align", "analyze"]

_SHARD = re.compile(r"^(.+)_\d{5}_of_\d{5}$")

#: What a call is, wherever it happened: type, operation, transform, call site, internal or not.
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


def _identities(run: Sequence[Event], known: dict[tuple[Any, ...], int]) -> list[int]:
    """Each event's identity, the same in every run whatever the order or cache state: its call
    (`_key`), its lineage (the identities of the steps that made its parents, by the user's call
    first: a warm run's fewer internal calls never shift it; -1 for none) and how many such calls
    came before it. Numbered in `known`, shared by the runs compared."""
    made: dict[str, int] = {}
    made_inside: dict[str, int] = {}
    seen: Counter[tuple[Any, ...]] = Counter()
    out: list[int] = []

    def number(identity: tuple[Any, ...]) -> int:
        return known.setdefault(identity, len(known))

    def parent(fp: str) -> int:
        shard = _SHARD.match(fp)  # num_proc shards are named after their map: <fp>_00000_of_00002
        for name in (fp, shard.group(1) if shard else None):
            if name in made or name in made_inside:
                return made.get(name, made_inside.get(name, -1))
        return -1

    for event in run:
        # Parents as a set (a concatenation over a set's order is still the same step), and a
        # source by the files it reads (a loop over a set loads them in another order).
        lineage = (_key(event), tuple(sorted(parent(p) for p in event.parents)), _source_identity(event))
        identity = number((*lineage, seen[lineage]))
        seen[lineage] += 1
        out.append(identity)
        if event.result is not None:
            if event.internal:
                made_inside.setdefault(event.result, number(lineage))
            else:
                made.setdefault(event.result, identity)
    return out


def _source_identity(event: Event) -> tuple[str, ...]:
    """The data files a source reads, whatever their order and modification time (a file
    rewritten between runs is the same source, differing)."""
    source = event.source
    if event.type != "root" or source is None:
        return ()
    return tuple(sorted({f.path for f in source.data_files}))


def align(runs: Sequence[Iterable[Event | Mapping[str, Any]]]) -> tuple[list[tuple[int, ...]], int]:
    """Rows of event positions, one position per run, matched by identity (`_identities`), in the
    first run's order; plus the number of events that could not be matched in every run."""
    events = [as_events(run) for run in runs]
    if not events:
        return [], 0
    known: dict[tuple[Any, ...], int] = {}
    where = [{identity: i for i, identity in enumerate(_identities(run, known))} for run in events]
    rows = [
        (i, *(w[identity] for w in where[1:]))
        for identity, i in where[0].items()
        if all(identity in w for w in where[1:])
    ]
    rows.sort()
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
    events = [as_events(run) for run in runs]
    positions, unaligned = align(events)
    matched = [{row[k] for row in positions} for k in range(len(events))]
    unaligned_internal = sum(
        1 for k, run in enumerate(events) for i, e in enumerate(run) if i not in matched[k] and e.internal
    )
    rows = [[events[k][i] for k, i in enumerate(row)] for row in positions]
    comparison = _Comparison(len(events), rows, state_changes(events, positions))
    for index, row in enumerate(rows):
        comparison.add(_step(index, positions[index], row), row)
    return replace(
        comparison.result(unaligned, unaligned_internal), one_run_only=_one_run_only(events, matched)
    )


def _one_run_only(events: Sequence[Sequence[Event]], matched: Sequence[set[int]]) -> tuple[Unmatched, ...]:
    """The user's calls a run recorded and another did not, once per run and call site (internal
    calls left out: a cold run makes them where a warm one loads the result)."""
    found: dict[tuple[int, str, str | None, int | None], Unmatched] = {}
    for k, run in enumerate(events):
        for i, event in enumerate(run):
            if i in matched[k] or event.internal:
                continue
            site, fn = event.call_site, event.function
            key = (k, event.operation or event.type, site.file if site else None, site.line if site else None)
            known = found.get(key)
            found[key] = (
                replace(known, count=known.count + 1)
                if known is not None
                else Unmatched(k, key[1], key[2], key[3], fn.qualname if fn is not None else None)
            )
    return tuple(found.values())


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
        #: Steps that hash an object an earlier step changed, where every run computed that step.
        self.unobserved: list[Cause] = []
        #: A dataset a source made, by the file it read (to name the inputs of a concatenation).
        self.names: dict[str, str] = {}
        for event in (e for row in rows for e in row):
            files = event.source.data_files if event.source is not None else ()
            if event.result is not None and files:
                more = f" (+{len(files) - 1})" if len(files) > 1 else ""
                self.names.setdefault(event.result, os.path.basename(files[0].path) + more)

    def add(self, step: Step, row: Sequence[Event]) -> None:
        fallback = any(e.random_fallback is not None for e in row)
        if not step.differs:
            self.steps.append(self._agreeing(step, row, fallback))
            return
        inherited = self._inherited(step)
        if inherited is not None:
            step = self._in_cascade(step, row, inherited, fallback)
            cause_index = inherited
        elif step.internal:
            # datasets' own step is never a cause: the user's call that has its fingerprint
            # (`select(new_fingerprint=)` in train_test_split) shares its cause; else no user step reads it.
            if self._made_by_user_call(step):
                self.deferred.append(step.index)
            elif fallback:
                self.hidden_random.append(random_cause(step, row))
            self.steps.append(replace(step, status="cascade"))
            return
        else:
            step, cause_index = self._new_cause(step, row, fallback)
        for k, fp in enumerate(step.results):
            if fp is not None:
                self.tainted[k][fp] = cause_index
        self.steps.append(step)

    def _agreeing(self, step: Step, row: Sequence[Event], fallback: bool) -> Step:
        if fallback:
            self.hidden_random.append(random_cause(step, row))
            return step
        change = self.changes.get(step.index)
        if change is not None and not step.internal and self._never_loaded(change.changed_at):
            # Every run computed the step that changes the object: whether a run that loads it agrees
            # was not observed. A note, not a cause (a cause is observed, never inferred).
            self.unobserved.append(state_cause(step, row, change, self.steps))
        return step

    def _never_loaded(self, index: int) -> bool:
        """Every run computed step `index`, and a later run could load it from the cache instead
        (a step without a persistent cache computes in every run: nothing depends on it)."""
        if index >= len(self.rows):
            return False
        return all(e.cache in ("miss", "partial") and e.uncached is None for e in self.rows[index])

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
            cause, status = source_cause(step, row, self.names), "source"
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
            unobserved=tuple(self.unobserved),
        )
