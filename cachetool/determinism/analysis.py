"""Align the trace events of N runs and explain the first fingerprint that differs: pure functions
over one event list per run (no subprocess, no disk). The rules (alignment by identity, causes,
cascades, sources, random fallbacks, cache-state changes) are in docs/check-determinism.md.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from cachetool.determinism.verdict import (
    Analysis,
    Cause,
    CauseKind,
    Event,
    SourceDiff,
    Step,
    StepStatus,
    Unmatched,
    as_events,
)
from cachetool.fingerprint.diff import (
    Culprit,
    Unpicklable,
    diff_trees,
    find_unpicklable,
    reordered,
    state_change_hint,
)
from cachetool.fingerprint.tree import as_node, iter_nodes, node_at, part_key, types_on_path
from cachetool.history.records.parts import ArgInfo

_SHARD = re.compile(r"^(.+)_\d{5}_of_\d{5}$")

#: What a call is, wherever it happened: type, operation, transform, call site, internal or not.
_Key = tuple[str, str | None, str | None, str | None, int | None, bool]


def _key(event: Event) -> _Key:
    file, line = _site(event)
    return (event.type, event.operation, event.transform, file, line, event.internal)


def _site(event: Event) -> tuple[str | None, int | None]:
    site = event.call_site
    return (site.file, site.line) if site is not None else (None, None)


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

    # A call that loads several sources (a loop over a set loads them in another order) tells
    # them by the files they read; one that loads one source is that source, wherever its files
    # are (a folder made anew by each run differs, it is no other step).
    loads = Counter(_key(e) for e in run if e.type == "root")
    for event in run:
        # Parents as a set (a concatenation over a set's order is still the same step).
        source = _source_identity(event) if loads[_key(event)] > 1 else ()
        lineage = (_key(event), tuple(sorted(parent(p) for p in event.parents)), source)
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
    fn = first.function
    return Step(
        index,
        positions,
        first.type or "transform",
        first.operation or "",
        first.transform or "",
        *_site(first),
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
    records (`load_events`) or the JSON objects of an events file, parsed once here."""
    events = [as_events(run) for run in runs]
    positions, unaligned = align(events)
    matched = [{row[k] for row in positions} for k in range(len(events))]
    rows = [[events[k][i] for k, i in enumerate(row)] for row in positions]
    comparison = _Comparison(len(events), rows, state_changes(events, positions))
    for index, row in enumerate(rows):
        comparison.add(_step(index, positions[index], row), row)
    return replace(comparison.result(unaligned), one_run_only=_one_run_only(events, matched))


def _one_run_only(events: Sequence[Sequence[Event]], matched: Sequence[set[int]]) -> tuple[Unmatched, ...]:
    """The user's calls a run recorded and another did not, once per run and call site (internal
    calls left out: a cold run makes them where a warm one loads the result)."""
    found: dict[tuple[int, str, str | None, int | None], Unmatched] = {}
    for k, run in enumerate(events):
        for i, event in enumerate(run):
            if i in matched[k] or event.internal:
                continue
            fn = event.function
            key = (k, event.operation or event.type, *_site(event))
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
        named = () if step.internal else file_name_diffs(row)
        if named:
            return self._named_anew(
                step, Cause(step, "file-name", tuple(d.key for d in named), file_names=named)
            )
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
                self.masked.append(Cause(step, "arguments", *own))
        return step

    def _named_anew(self, step: Step, cause: Cause) -> Step:
        """A step with the same fingerprint in every run whose cache file each run names anew:
        a cause of its own, unless it repeats one (the test indices of a `train_test_split`)."""
        repeated = next((i for i, c in enumerate(self.causes) if same_story(c, cause)), None)
        if repeated is not None:
            return replace(step, status="cascade", cause=repeated)
        step = replace(step, status="cause", cause=len(self.causes))
        self.causes.append(replace(cause, step=step))
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
        elif step.type == "root" and any(e.fingerprint_given for e in row):
            cause = Cause(step, "given")  # `from_generator(fingerprint=)`
        elif len(set(step.parents)) > 1 or step.type == "root":
            cause, status = source_cause(step, row, self.names), "source"
        elif change is not None:
            cause = state_cause(step, row, change, self.steps)
        elif any(e.fingerprint_given for e in row):
            cause = Cause(step, "given")
        else:
            diffs = arg_diffs(row)
            if not diffs.differing_args:
                diffs = self._inside(step)
            kind: CauseKind = "arguments" if diffs.differing_args else "unexplained"
            cause = Cause(step, kind, *diffs)
        repeated = next((i for i, c in enumerate(self.causes) if same_story(c, cause)), None)
        if repeated is not None:
            # The same call and culprit again (the other split of a DatasetDict.map, the test
            # output of train_test_split): part of the first, not a cause of its own.
            return replace(step, status="cascade", cause=repeated), repeated
        step = replace(step, status=status, cause=cause_index)
        self.causes.append(replace(cause, step=step))
        return step, cause_index

    def _inside(self, step: Step) -> ArgDiffs:
        """The arguments that differ in the steps `datasets` makes inside a call from the same
        input in every run (`cast(features)` maps with `features=`): what makes the call's
        fingerprint differ when the call itself records no argument."""
        for row in self.rows[step.index + 1 :]:
            if _site(row[0]) != (step.file, step.line):
                continue
            if not row[0].internal:
                break  # the same call again (a loop)
            if len({tuple(e.parents) for e in row}) == 1:
                diffs = arg_diffs(row, skip_datasets=True)
                given = [a for a in diffs.differing_args if a != "function" or step.function is not None]
                if given:
                    # datasets' own function (a `table_cast` partial of the schema) follows from
                    # the arguments the user gave: those are named.
                    return ArgDiffs(tuple(given), tuple(c for c in diffs.culprits if c.argument in given))
                if diffs.differing_args:
                    return diffs
        return ArgDiffs((), ())

    def result(self, unaligned: int) -> Analysis:
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
            hidden_random=tuple(self.hidden_random),
            masked=tuple(self.masked),
            unobserved=tuple(self.unobserved),
        )


# What makes one aligned step differ, over one row (the step's event in each run): its arguments
# diffed tree against tree, the source it reads, the piece `datasets` could not pickle, or an object
# an earlier step changed while it ran (`ArgInfo.after`; datasets #3638, #5985, #3847).
class ArgDiffs(NamedTuple):
    """The arguments whose digests differ between runs, and the culprit found inside each."""

    differing_args: tuple[str, ...]
    culprits: tuple[Culprit, ...]


#: Datasets given as arguments (hashed by their fingerprint); not `datasets.Features` or a
#: `ClassLabel`, which are hashed by value.
_DATASET_TYPES = frozenset(
    f"datasets.{name}" for name in ("Dataset", "DatasetDict", "IterableDataset", "IterableDatasetDict")
)


def _is_dataset(tree: Mapping[str, Any] | None) -> bool:
    return tree is not None and str(tree.get("t", "")) in _DATASET_TYPES


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
        if len(set(digests)) == 1:
            # Equal digests, or an argument no run hashed (`num_proc`, recorded in some runs only
            # to say how the step ran): it cannot make a fingerprint differ.
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
    by = steps[change.changed_at] if change.changed_at < len(steps) else None
    args = arg_diffs(row).differing_args
    return Cause(step, "cache-state", args, (change.culprit,), variation="cache state", changed_by=by)


def file_name_diffs(row: Sequence[Event]) -> tuple[SourceDiff, ...]:
    """The output files the script named differently in each run (a new temporary folder, the
    time in the name), where the step wrote one of them: a rerun never finds the file the last run wrote.
    None for a step whose last run was told not to load it anyway (`load_from_cache_file=False`)."""
    if row[-1].no_cache == "load-from-cache-file-false":
        return ()
    names = sorted({name for e in row for name in e.named_files})
    paths = ((name, tuple(e.named_files.get(name) or "-" for e in row)) for name in names)
    diffs = tuple(SourceDiff(name, values) for name, values in paths if len(set(values)) > 1)
    # train_test_split's train output wrote the train indices: both names are its call's.
    used = any(_wrote_at(e, e.named_files.get(d.key)) for d in diffs for e in row)
    return diffs if used else ()


def _wrote_at(event: Event, path: str | None) -> bool:
    """The step wrote or reused a file at `path`: that file, its `num_proc` shards
    (`out_00000_of_00002.arrow`), or one in that folder (`cache_dir`). A name `datasets` did not
    use (`select` of a contiguous range writes no indices) makes no difference."""
    if not path:
        return False
    shards = path.removesuffix(".arrow") + "_"
    return any(f.path == path or f.path.startswith((shards, path + "/")) for f in event.files)


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
            piece = find_unpicklable(name, as_node(entry.tree), errors[0] if errors else None)
            if piece is not None:
                found.append(piece)
    # Every run drew the same "random" fingerprint from Python's global `random` (`random.seed`).
    predictable = not step.differs and all(e.random_fallback and e.random_fallback.predictable for e in row)
    errs = tuple(dict.fromkeys(errors))
    return Cause(step, "random", tuple(args), unpicklable=tuple(found), errors=errs, predictable=predictable)


def source_cause(step: Step, row: Sequence[Event], names: Mapping[str, str] | None = None) -> Cause:
    """A source (a root, or a step whose parents differ) that differs: where its descriptions
    differ, column by column for a dataset built in memory, and any argument that differs too.
    When the runs give it the same inputs in another order (data files, the datasets it
    concatenates: named by `names`, fingerprint -> what made it), that order is the difference."""
    columns = _column_diffs(row)
    orders = _order_diffs(row, names or {})
    source_diffs = _source_diffs(row)
    if orders:  # the builder folder's name is the hash of that order: not a difference of its own
        source_diffs = [d for d in source_diffs if d.key != "relative_data_dir"]
    differences = (*orders, *source_diffs, *columns)
    return Cause(step, "source", *arg_diffs(row), source_diffs=differences, columns_differ=bool(columns))


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
    sa, sb = ((c.step.file, c.step.line, c.step.operation, c.kind, c.differing_args) for c in (a, b))
    same = sa == sb and [c.path_str for c in a.culprits] == [c.path_str for c in b.culprits]
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
    names = [list(t) for t in tables]
    if reordered(names):  # the same columns in another order (`from_list` of dicts keyed from a set)
        out.append(SourceDiff("columns order", tuple(", ".join(n) for n in names)))
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
        # Files: keyed by their name, so an added or removed file shows as such; a file read
        # from another folder shows its folder.
        for v in value:
            folder, _, name = str(v["path"]).rpartition("/")
            rest = {k: x for k, x in v.items() if k != "path"}
            _flatten({"folder": folder, **rest}, f"{prefix}[{name}]", out)
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
