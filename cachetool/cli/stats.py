"""`cachetool stats`: how well the cache works, from the recorded runs (like `ccache -s`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from cachetool.cli.common import CACHE_DIR, command, opt, output
from cachetool.cli.output import Output, hint, warn
from cachetool.formatting import human_size, local_time, short_duration

if TYPE_CHECKING:
    from cachetool.history.compact import CompactionReport
    from cachetool.history.ledger_stats import Group, StatsReport


@command(
    since=opt(
        "--since",
        help="Count only the last period: 90m, 12h, 7d, 4w (and never before --zero).",
        type=str | None,
        show_default=False,
    ),
    zero=opt("--zero", "-z", help="Start a new counting period now (no record is deleted)."),
    all_=opt("--all", help="Ignore the last --zero: count every record."),
    top=opt("--top", help="Rows in the per call site and per dataset tables.", type=int, default=10, min=0),
    compact=opt(
        "--compact",
        help="First compact the ledger: old runs summarised, what the cache still holds kept whole.",
    ),
    dry_run=opt("--dry-run", "-n", help="With --compact: say what it would do, change nothing."),
    cache_dir=CACHE_DIR,
    **output(quiet="the hit rate alone, 0 to 1 (empty: no lookups)"),
)
def stats_command(zero: bool, top: int, cache_dir: Path | None, out: Output, **options: Any) -> None:
    """Summarise the cache's hits and misses from the recorded runs, like `ccache -s`.

    Counts runs, steps, hits, misses (a num_proc step that reused some shards is a partial
    miss), the hit rate per call site and per dataset, the time spent computing misses and the
    part of it lost to recomputing steps that had run before, random fingerprints with their
    reasons, and the bytes written. `--zero` starts a new counting period without deleting any
    record (`--all` looks past it). Needs pipelines run under `cachetool run`. On a cache several
    hosts share: steps per host, and the fingerprints two runs computed at the same time, with
    the time lost. `--compact` folds the finished runs older than the newest 50 segments (one
    per traced process) into one summary each (counted in the totals, not per call site) and
    keeps whole what the cache still holds and its parents, so a long-lived ledger stays small;
    `--dry-run` says what it would do.

    **Examples**

        cachetool stats

        cachetool stats --since 7d

        cachetool stats --json | jq .hit_rate

        cachetool stats --zero

        cachetool stats --compact --dry-run

    Exit codes: 0 shown (also when nothing is recorded); 2 usage (bad --since, missing cache).
    """
    if options["dry_run"] and not options["compact"]:
        raise typer.BadParameter("goes with --compact", param_hint="--dry-run")
    from cachetool.cache.locations import existing_root
    from cachetool.history.ledger_stats import ledger_stats, zero_stats

    root = Path(os.path.abspath(existing_root(cache_dir)))
    if zero:
        t = zero_stats(root)
        if not out.emit(lambda: {"root": str(root), "zeroed_at": t}, [str(t)]):
            out.line(
                f"Statistics zeroed at {_when(t)} (records kept; `cachetool stats --all` still sees them)"
            )
        return
    report = ledger_stats(root, **options)  # since, all_, compact, dry_run
    if report.compaction is not None and out.human:
        render_compaction(out, report.compaction)
    from cachetool.cli.remote import served_lines

    remote = served_lines(root, report.start)  # results pulled from a remote, when any were
    looked = report.total.hits + report.total.misses
    if not out.emit(
        lambda: {**report.to_json(), **remote[0]}, [f"{report.total.hits / looked:.4g}" if looked else ""]
    ):
        render(out, report, top)
        for line in remote[1]:
            out.line(line)
    warn(*report.warnings)
    if report.total.steps == 0 and not report.saves:
        if report.start is not None and ledger_stats(root, all_=True).total.steps:
            how = (
                "a longer --since counts earlier runs"
                if options["since"]
                else "`cachetool stats --all` counts those before --zero"
            )
            hint(f"no step recorded since {_when(report.start)}: {how}")
        else:
            hint("statistics come from pipelines run with `cachetool run pipeline.py`")


def compaction_line(c: CompactionReport) -> str:
    """What a compaction did (or would do), in one line (`stats --compact`, `gc`)."""
    if not c.segments:
        return f"Ledger: nothing to compact ({human_size(c.bytes_before)}: {c.why_nothing})"
    verb = "Would compact" if c.dry_run else "Compacted"
    folded = f", {c.gc_folded} gc removal(s) counted" if c.gc_folded else ""
    return (
        f"{verb} the ledger: {c.runs} run(s) summarised ({c.summarised} records){folded}, {c.kept} "
        f"records kept whole; {human_size(c.bytes_before)} → {human_size(c.bytes_after)}"
    )


def render_compaction(out: Output, c: CompactionReport) -> None:
    """One line for what `--compact` did (or would do), and the old runs it left."""
    out.line(compaction_line(c))
    if c.left:
        out.line(f"  {len(c.left)} old segment(s) left whole: a writer may still be running (or see below)")
    out.line("")
    warn(*c.warnings)


def _when(t: float | None) -> str:
    return "-" if t is None else local_time(t, seconds=False)


def _telling(groups: tuple[Group, ...]) -> tuple[Group, ...]:
    """The groups with something to show: one whose steps wrote no file and lost no time (a
    `select` of a range) would be a row of zeros; the totals count it, `--json` lists it."""
    return tuple(
        g
        for g in groups
        if g.counts.hits or g.counts.misses or g.counts.recompute_seconds or g.counts.bytes_written
    )


def _group_rows(groups: tuple[Group, ...], top: int, site: bool) -> list[list[str]]:
    return [
        [
            f"{g.key} {g.function}" if site and g.function else g.key,
            str(g.counts.hits),
            str(g.counts.misses),
            g.counts.hit_rate_str,
            short_duration(g.counts.recompute_seconds),
            human_size(g.counts.bytes_written),
        ]
        for g in groups[:top]
    ]


def render(out: Output, r: StatsReport, top: int = 10) -> None:
    """Human output: the totals as `label value` lines, then the two tables."""
    t = r.total
    period = f"since {_when(r.start)}" if r.start is not None else "all recorded runs"
    if r.zeroed_at is not None and r.start == r.zeroed_at:
        period += " (zeroed)"
    out.line(f"Cache statistics for {r.root} — {period}", style="bold")
    looked = t.hits + t.misses
    nd, back = r.nondeterminism, r.given_back
    cpu = f"CPU {short_duration(nd.total.cpu_seconds)}, " if nd.total.cpu_seconds else ""
    steps, rekeyed = (f"{n} step{'s' if n != 1 else ''}" for n in (nd.total.steps, back.rekey.steps))
    given: list[tuple[str, str | None]] = [  # None: a row left out
        ("Runs", str(t.runs)),
        ("Hosts", ", ".join(f"{h} ({n} steps)" for h, n in r.hosts) if len(r.hosts) > 1 else None),
        ("Steps recorded", str(t.steps)),
        ("Hits", f"{t.hits}" + (f"  ({t.hit_rate_str})" if looked else "")),
        ("Misses", f"{t.misses}" + (f"  ({t.partial} partial)" if t.partial else "")),
        ("Steps without a cache file", str(t.no_file)),
        ("Steps that failed", str(t.failed) if t.failed else None),
        ("Steps interrupted (Ctrl-C)", str(t.interrupted) if t.interrupted else None),
        ("Steps killed (SIGKILL, OOM)", str(r.killed) if r.killed else None),
        ("Steps without a persistent cache", f"{t.uncached}  ({short_duration(t.uncached_seconds)})"),
        ("Time computing misses", short_duration(t.miss_seconds)),
        ("Time lost recomputing", short_duration(t.recompute_seconds)),
        (
            "Recomputed for nondeterminism",
            f"{short_duration(nd.total.seconds)}  ({cpu}{steps})" if nd.total.steps else None,
        ),
        ("Random fingerprints", str(r.random_count)),
        ("Saves", str(r.saves)),
        ("Bytes written", human_size(t.bytes_written)),
        ("Lost to concurrent runs", short_duration(r.concurrent_seconds) if r.concurrent else None),
        (
            "Given back by resume",
            f"{short_duration(back.resume.seconds)}  ({back.resume.rows:,} rows)"
            if back.resume.steps
            else None,
        ),
        (
            "Given back by re-key",
            f"{short_duration(back.rekey.seconds)}  ({rekeyed})" if back.rekey.steps else None,
        ),
    ]
    rows = [(k, v) for k, v in given if v is not None]
    width = max(len(k) for k, _ in rows) + 2
    for k, v in rows:
        out.line(f"  {k.ljust(width)}{v}")
        if k == "Random fingerprints":
            for reason in r.random:
                arg = reason.argument or "the transform"
                out.line(f"    {reason.count}× {arg}: {reason.error}")
        if k == "Lost to concurrent runs":
            for c in r.concurrent[:top]:
                out.line(f"    {c.sentence()}")
            out.line("    Hint: `cachetool run --once` computes each step once (docs/hosts.md)", style="dim")
        if k == "Recomputed for nondeterminism":
            for lost in (*nd.culprits[:top], *nd.call_sites[:top]):
                what = f"culprit `{lost.key}` ({lost.kind})" if lost.kind else f"call site {lost.key}"
                what += f" {lost.function}" if lost.function else ""
                out.line(f"    {short_duration(lost.hours.seconds)}  {what.rstrip()}")
    cols = [(h, "right") for h in ("hits", "misses", "hit rate", "recompute", "written")]
    sites, datasets = _telling(r.call_sites), _telling(r.datasets)
    if sites:
        out.line("")
        out.table("Per call site", [("call site", "left"), *cols], _group_rows(sites, top, True))
    if datasets:
        out.line("")
        out.table("Per dataset", [("dataset", "left"), *cols], _group_rows(datasets, top, False))
    hidden = [
        f"{n - top} more {what}"
        for n, what in ((len(sites), "call sites"), (len(datasets), "datasets"))
        if n > top
    ]
    if hidden:
        out.line(f"({', '.join(hidden)}: --top N, or --json)", style="dim")
