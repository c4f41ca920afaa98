"""`cachetool explain`: why a step was recomputed, and whether a cache hit is stale."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool.cli.common import ALL_ROOTS, CACHE_DIR, command, output
from cachetool.cli.output import Output, hint, warn
from cachetool.errors import CacheNotFound, CachetoolError, ExitCode
from cachetool.formatting import local_time, short_duration
from cachetool.hints import shell_command

if TYPE_CHECKING:
    from cachetool.history.explain.answer import ExplainReport, Reason, StaleHit, StepExplanation
    from cachetool.history.runs import Failure, Interruption, RunState


@command(
    None,
    "cachetool.history.explain.explainer.ExplainOptions",
    "fingerprint last script history cache_dir fmt as_json quiet all_roots",
    cache_dir=CACHE_DIR,
    **output(quiet="the explained steps' fingerprints, one a line"),
    all_roots=ALL_ROOTS,
)
def run_explain(cache_dir: Path | None, out: Output, **keywords: Any) -> int:
    """Say why a step was recomputed, and warn when a cache hit reused a result of older code.

    A recorded step is compared with its siblings: earlier records of the same call site (or
    function) with another fingerprint, most recent first. The answer names what changed: an
    argument (`fn_kwargs['threshold']` changed 0.5 → 0.6), the function's source (with the line),
    an object that pickles differently in every process (then run `cachetool check-determinism`),
    the source dataset (an input file modified), a random fingerprint (an argument `datasets`
    cannot hash), or only an argument that does not change the result (`writer_batch_size`). A
    change upstream is named with the step where it happened. "first run recorded in this
    cache" when the cache held nothing before this run (runs recorded in other caches do not
    count: explain and lineage read the ledger of this cache, plus the roots its inputs come
    from), "first time this step ran" when there is nothing else to compare with.

    **Stale hits.** A function imported from your own module is hashed by name, so editing it
    keeps the fingerprint and `datasets` reuses the old result. explain reports "cache entry
    cache-….arrow was reused at 10:31, but `clean_text` in text_helpers.py changed since it was
    computed", with the line, and every entry made from it as stale too; the hint removes them
    all in one `cachetool gc` command.

    Needs pipelines run under `cachetool run` (or `cachetool.tracing()`).

    **Examples**

        cachetool explain --last

        cachetool explain 7a5731241fa9ef8b

        cachetool explain 7a57 --history 10

        cachetool explain --script train.py --json

    Exit codes: 0 explained; 1 a stale cache hit was found; 2 usage (no fingerprint and no
    --last/--script, unknown or ambiguous fingerprint, nothing recorded, missing cache).
    """
    from cachetool.cache.locations import root_for
    from cachetool.cache.roots import latest_root_elsewhere
    from cachetool.cache.walk import gc_paused
    from cachetool.history.explain.explainer import ExplainOptions, explain

    options = ExplainOptions(**keywords)  # refused before any read
    root: Path | None = None
    try:
        root = Path(os.path.abspath(root_for(options.fingerprint, cache_dir)))
        with gc_paused(freeze=True):  # a long ledger's records make many objects and no cycles
            report = explain(root, **vars(options))
    except CachetoolError as e:
        # --last where nothing was recorded: the run may have written under `cache_dir=` only.
        missing = isinstance(e, CacheNotFound) and e.default
        base = e.root if isinstance(e, CacheNotFound) else root
        other = latest_root_elsewhere(base) if options.last and base is not None else None
        if other is None or not (missing or e.message.startswith("no recorded")):
            raise
        command = shell_command("explain", "--last", "--cache-dir", other)
        raise CachetoolError(
            f"{e.message}; the last traced run recorded steps in {other}: `{command}`"
        ) from e
    others = []  # with --all-roots the steps the run recorded in other roots are shown here
    if report.mode == "run" and report.run is not None and not options.all_roots:
        others = _roots_with_run(root, report.run)
    if not out.emit(report.to_json, (s.step.fingerprint for s in report.steps if s.step.fingerprint)):
        render(out, report, elsewhere=bool(others))
    warn(*report.warnings)
    if others:
        for other in others:
            command = shell_command("explain", "--last", "--cache-dir", other)
            hint(f"this run also recorded steps in {other}, a cache root of its own: `{command}`")
    elif options.last and report.run is not None and not options.all_roots and root is not None:
        later = _later_run_here(root, report.run)
        if later is not None:
            command = shell_command("explain", "--last", "--cache-dir", later)
            hint(f"a later traced run from this folder recorded its steps in {later}: `{command}`")
    if report.stale:
        first, *rest = _by_root(report.stale).values()
        hint(first[0].hint)
        if rest:
            from cachetool.cache.roots import other_roots

            saved = {path for path, kind in other_roots(root) if kind == "saved"}
            for group in rest:
                hint(group[0].elsewhere_hint(saved=os.path.realpath(group[0].root or "") in saved))
        return int(ExitCode.PROBLEMS_FOUND)
    return int(ExitCode.OK)


def _later_run_here(root: Path, run: str) -> str | None:
    """The root whose newest ledger segment is a run other than `run` that started in this working
    directory after `run`'s segment here was last written (a run with `cache_dir=` elsewhere), or
    None (`newest_segment_elsewhere`; only that segment's first record is read)."""
    from cachetool.cache.roots import ledger_dir, newest_segment_elsewhere
    from cachetool.safejson import parse_json

    newest = newest_segment_elsewhere(root)
    if newest is None:
        return None
    mtime, other, segment = newest
    try:
        if segment.stem == run or mtime <= (ledger_dir(root) / f"{run}.jsonl").stat().st_mtime:
            return None
        with open(segment, "rb") as f:
            start = parse_json(f.readline(64 * 1024))
    except Exception:  # a hint only
        return None
    return other if isinstance(start, dict) and start.get("cwd") == os.getcwd() else None


def _roots_with_run(root: Path, run: str) -> list[str]:
    """Other roots (a `save_to_disk` folder a `map` after `load_from_disk` wrote in) where `run`
    recorded steps, and where it is the latest run, so `--last` there explains it."""
    from cachetool.cache.roots import ledger_dir, other_roots

    found = []
    for other, _ in other_roots(root):
        segment = ledger_dir(other) / f"{run}.jsonl"
        try:
            mine = segment.stat().st_mtime
            newest = max(p.stat().st_mtime for p in ledger_dir(other).glob("*.jsonl"))
        except (OSError, ValueError):
            continue
        if mine >= newest:
            found.append(other)
    return found


def _by_root(stale: tuple[StaleHit, ...]) -> dict[str | None, list[StaleHit]]:
    """Stale hits by the cache root they are in (each root's hint is its own gc command), in
    the order the roots first appear."""
    out: dict[str | None, list[StaleHit]] = {}
    for s in stale:
        out.setdefault(s.root, []).append(s)
    return out


def _reason_lines(out: Output, reason: Reason, indent: str) -> None:
    out.line(f"{indent}{reason.text}")
    for change in reason.lines[1:]:
        out.line(f"{indent}  {change}")
    if reason.hint and reason.kind in ("nondeterministic", "random", "non-semantic"):
        out.line(f"{indent}  hint: {reason.hint}", style="dim")


def _stale_lines(out: Output, stale: StaleHit, indent: str) -> None:
    out.line(f"{indent}{stale.message}", style="yellow")
    shown = next((c.lines[0] for c in stale.changes if c.lines), None)  # in the message already
    for change in stale.changes:
        where = os.path.basename(change.file) if change.file else "?"
        for line in change.lines:
            if line is not shown:
                out.line(f"{indent}  {change.name} ({where}) {line}")


def _step_lines(
    out: Output,
    s: StepExplanation,
    detailed: bool,
    number: int | None = None,
    numbers: dict[str, int] | None = None,
    said: str | None = None,
) -> None:
    """One step: its head line, then its reasons. In a run, steps are numbered (`number`; the
    others' by fingerprint in `numbers`): a cause upstream that is a step of the run reads "its
    input changed: see step N" (said in full once, at that step), and the reason `said` already
    (once for the run) is left out."""
    head = f"{s.step.label}  ->  {s.step.fingerprint}"
    if number is not None:
        head = f"{number}. {head}"
    c = s.compared_with
    # On a shared cache the compared step may come from another node: say where each ran.
    elsewhere = c is not None and bool(c.host and s.step.host and c.host != s.step.host)
    tail = [f"{s.status} on {s.step.host}" if elsewhere else s.status]
    if s.duration is not None:
        tail.append(short_duration(s.duration))
    out.line(f"{head}  ({', '.join(tail)})", style="bold")
    if detailed:
        out.line(f"  at {local_time(s.step.time)}, run {s.step.run}")

    def upstream_number(reason: Reason) -> int | None:
        up = reason.upstream
        n = (numbers or {}).get(up.fingerprint or "") if up is not None else None
        return n if n is not None and n != number else None

    refs = list(dict.fromkeys(n for r in s.reasons if (n := upstream_number(r)) is not None))
    for reason in s.reasons:
        if reason.text == said:
            continue
        if upstream_number(reason) is None:
            _reason_lines(out, reason, "    ")
        elif refs:
            many = "s" if len(refs) > 1 else ""
            out.line(f"    its input changed: see step{many} {', '.join(map(str, refs))}")
            refs = []
    if detailed and c is not None:
        on = f", on {c.host}" if elsewhere else ""
        out.line(f"  compared with {c.fingerprint} ({local_time(c.time)}, run {c.run}{on})", style="dim")
    if detailed and s.history:
        out.line("  Earlier:")
        for ref, reasons in s.history:
            why = reasons[0].text if reasons else "?"
            out.line(f"    {ref.fingerprint} ({local_time(ref.time)}): before that, {why}")


def _uncached_lines(out: Output, report: ExplainReport) -> None:
    from cachetool.history.explain.answer import UNCACHED_HINT

    n = len(report.uncached)
    if report.steps:
        out.line("")
    out.line(
        f"{n} step{'' if n == 1 else 's'} ran without a persistent cache, "
        f"{short_duration(report.uncached_seconds)} in this run; they run again in every run:",
        style="bold yellow",
    )
    for u in report.uncached:
        out.line(f"  {u.step.label}  {short_duration(u.duration)}: {u.reason_text}")
    out.line(UNCACHED_HINT)


_ENDED = {
    "killed": "was killed",
    "running": "is still running",
    "unknown": "ended without closing (killed, or still running there)",
}


def _writers(files: list[Any]) -> frozenset[int]:
    """The live processes of this host writing any of `files` (`UnfinishedFile`s)."""
    if not files:
        return frozenset()
    from cachetool.maintenance.liveness import scan_in_use

    in_use = scan_in_use()
    pids: set[int] = set()
    for f in files:
        try:
            pids |= in_use.writer_pids(os.stat(f.path, follow_symlinks=False))
        except OSError:
            continue
    return frozenset(pids)


def _interrupted_lines(out: Output, i: Interruption, elsewhere: bool) -> None:
    from cachetool.formatting import human_size
    from cachetool.history.runs import PREPARE_OPERATIONS
    from cachetool.maintenance.liveness import pids_text

    where = f"process {i.pid} on {i.host}" if i.pid is not None else "its process"
    step = i.step
    if step is None:
        # Its steps in another root (a saved folder) are explained there: the hint names it.
        said = "not in a step of this cache" if elsewhere else "between steps"
        out.line(f"The run {_ENDED[i.state]} ({where}){',' if elsewhere else ''} {said}.", style="bold red")
    else:
        site = step.call_site
        at = f" @ {os.path.basename(site.file or '?')}:{site.line}" if site is not None else ""
        out.line(
            f"The run {_ENDED[i.state]} ({where}) in {step.operation or 'a step'}{at}, "
            f"started at {local_time(step.time)}.",
            style="bold red",
        )
        if step.operation == "save_to_disk" and step.paths:
            _save_lines(out, i.state, step.paths[0], step.time)
            out.line("")
            return
        if step.operation in PREPARE_OPERATIONS and step.paths:
            _prepare_lines(out, i.state, step.paths[0], step.root)
            out.line("")
            return
        partial = [f for f in i.written if not f.finished and f.resumable_rows]
        tmp = [f for f in i.written if not f.finished and not f.resumable_rows]
        # Still writing: what a rerun would take back is not known yet. A killed map's num_proc
        # workers outlive it and go on writing (they finish the shards).
        workers = _writers(tmp + partial) if i.state == "killed" else frozenset()
        still = i.state == "running" or bool(workers)
        writing, tmp, partial = (tmp + partial, [], []) if still else ([], tmp, partial)
        by = (
            f"Its num_proc workers (pid {pids_text(workers)}) are still writing"
            if workers
            else "It is writing"
        )
        for title, files in (
            (f"{by} (unfinished):", writing),
            ("Its partial output (a traced rerun of the pipeline reuses these rows):", partial),
            ("It had written (unfinished; datasets does not reuse these):", tmp),
            (
                "Finished num_proc shards of the step (datasets reuses these):",
                [f for f in i.written if f.finished],
            ),
        ):
            if files:
                out.line(f"  {title}")
            for f in files:
                rows = f", {f.resumable_rows:,} rows" if files is partial else ""
                out.line(f"    {f.path}  {human_size(f.size)}{rows}")
        if not i.written:
            out.line("  Nothing it wrote is left in the cache.")  # never written, or removed since
        if (tmp or partial) and i.state == "killed":
            root = step.root or os.path.dirname((tmp or partial)[0].path)
            if partial:  # `gc --temp` keeps a resumable partial for a day; removing it loses its rows
                out.line("  To continue it, run the pipeline again (`cachetool run`); to remove its files:")
            else:
                out.line("  To remove its unfinished files:")
            out.line(
                f"    {shell_command('gc', '--temp', '--min-age', '0', '--cache-dir', root)}", wrap=False
            )
    out.line("")


def _save_lines(out: Output, state: RunState, folder: str, started: float) -> None:
    """The folder a run killed in `save_to_disk` (begun at `started`) left unfinished
    (`state.json` comes last: without one `load_from_disk` cannot read it; with an earlier save's
    it reads the files of both saves as one), and what to do."""
    if not os.path.isdir(folder):
        out.line(f"  It was saving to {folder}, which is gone since.")
        return
    if state == "running":
        out.line(f"  It is saving to {folder} (unfinished until its state.json is written).")
        return
    left = "left" if state == "killed" else "may have left"
    try:  # the state.json of an earlier save into the folder (this one writes its own last)
        earlier = os.stat(os.path.join(folder, "state.json")).st_mtime < started
    except OSError:
        earlier = False
    what = "an earlier save's state.json, over data files of both saves" if earlier else "no state.json"
    parent = os.path.dirname(folder)
    if os.path.isfile(os.path.join(parent, "dataset_dict.json")):
        # A DatasetDict's split: the user saved the dict's folder, whose dataset_dict.json would
        # still name the split once the split's folder alone is removed.
        what = f"its split {os.path.basename(folder)} has {what}"
        folder = parent
    what += ": load_from_disk reads them as one" if earlier else ": load_from_disk cannot read it"
    out.line(f"  It {left} {folder} unfinished ({what}).")
    out.line("  To save it anew, run the pipeline again; to remove the unfinished folder:")
    out.line(f"    {shlex.join(['rm', '-r', folder])}", wrap=False)


def _prepare_lines(out: Output, state: RunState, folder: str, root: str | None) -> None:
    """The `.incomplete` folder a run killed in `load_dataset` left (datasets renames it to
    `folder` when the preparation ends, and prepares anew over a leftover), and what to do."""
    from cachetool.cache.layout import INCOMPLETE_DIR_SUFFIX

    building = folder + INCOMPLETE_DIR_SUFFIX
    if not os.path.isdir(building):
        done = "which is prepared since" if os.path.isdir(folder) else "and nothing it wrote is left"
        out.line(f"  It was preparing {folder}, {done}.")
        return
    if state == "running":
        out.line(f"  It is preparing {folder} (writing {building}).")
        return
    left = "left" if state == "killed" else "may have left"
    out.line(f"  It {left} {building} unfinished (the next run prepares the dataset anew).")
    if state == "killed":
        out.line("  To remove it:")
        where = root or os.path.dirname(folder)
        out.line(f"    {shell_command('gc', '--temp', '--min-age', '0', '--cache-dir', where)}", wrap=False)


def _failed_lines(out: Output, f: Failure, root: Path) -> None:
    step = f.step
    where = ""
    if step is not None:
        site = step.call_site
        fn = step.function.qualname if step.function and step.function.qualname else None
        where = f" in {' '.join(x for x in (step.operation or 'a step', fn) if x)}"
        if site is not None:
            where += f" @ {os.path.basename(site.file or '?')}:{site.line}"
    why = f"exit status {f.status}"
    if f.exception:
        why = f"{f.exception}: {f.message}" if f.message else f.exception
    if f.exception == "KeyboardInterrupt":
        out.line(f"The run was interrupted (Ctrl-C){where}.", style="bold red")
    else:
        out.line(f"The run failed{where} ({why}).", style="bold red")
    if f.read_error:
        out.line("  A cache file it read may be damaged; to find it, run:")
        out.line(f"    {shell_command('verify', '--cache-dir', os.fspath(root))}", wrap=False)
    elif f.disk_full:
        command = shell_command("ls", "--sort", "size", "--cache-dir", os.fspath(root))
        out.line(f"  The disk was full: `{command}` lists what holds the room.")
    out.line("")


def render(out: Output, report: ExplainReport, *, elsewhere: bool = False) -> None:
    """Human output: one block per computed step, then the stale hits. `elsewhere`: the run
    recorded steps in other roots too."""
    if report.mode == "run":
        computed = report.computed
        n = len(report.uncached)
        out.line(
            f"Run {report.run} at {local_time(report.run_time)}: {computed} step"
            f"{'' if computed == 1 else 's'} computed, {report.loaded} loaded from the cache"
            + (f", {n} without a persistent cache" if n else "")
            + (" here; it recorded steps in other caches too" if elsewhere else ""),
            style="bold",
        )
        out.line("")
        if report.interrupted is not None:
            _interrupted_lines(out, report.interrupted, elsewhere)
        if report.failed is not None:
            _failed_lines(out, report.failed, report.root)
        numbers = {s.step.fingerprint: n for n, s in enumerate(report.steps, 1) if s.step.fingerprint}
        first = {r.text for s in report.steps for r in s.reasons if r.kind == "first-run"}
        said = None
        every = all(s.reasons and all(r.kind == "first-run" for r in s.reasons) for s in report.steps)
        if len(first) == 1 and report.steps and every:
            said = first.pop()  # "first run recorded in this cache": once for every step
            header = said.replace("this step", "each of these steps") if len(report.steps) > 1 else said
            out.line(header[0].upper() + header[1:] + ".")
            out.line("")
        for n, s in enumerate(report.steps, 1):
            _step_lines(out, s, detailed=False, number=n, numbers=numbers, said=said)
        if report.uncached:
            _uncached_lines(out, report)
        elif not report.steps and report.interrupted is None and report.failed is None:
            out.line("Nothing was recomputed in this cache." if elsewhere else "Nothing was recomputed.")
    else:
        for s in report.steps:
            _step_lines(out, s, detailed=True)
    for where, group in _by_root(report.stale).items():
        here = where is None or os.path.abspath(where) == os.path.abspath(report.root)
        out.line("")
        if here:
            out.line("Stale cache hits:", style="bold yellow")
        else:  # the path alone on its line: copyable at any width
            out.line("Stale cache hits in another cache root:", style="bold yellow")
            out.line(f"  {where}", style="yellow", wrap=False)
        for stale in group:
            _stale_lines(out, stale, "  ")
