"""`cachetool merge`: one report from the `--json` documents of `ls` and `verify` jobs
(`--shard i/n`, one or many hosts)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.cli.common import OUTPUT, REQUIRED, arg, command
from cachetool.cli.output import Output, warn

if TYPE_CHECKING:
    from cachetool.maintenance.fleet import FleetReport


@command(
    files=arg(
        "`ls --json` and `verify --json` documents (shards of one cache, or of many hosts).",
        list[Path],
        REQUIRED,
        metavar="FILE",
        show_default=False,
    ),
    **OUTPUT,
)
def merge_command(files: list[Path], out: Output) -> int:
    """Join the --json documents of ls and verify jobs into one fleet report.

    Reads each file (never a cache): the shards of `ls --shard i/n` and `verify --shard i/n` jobs,
    from one host or many (each document names its host). Says per host its entries, files and
    bytes (and what verify checked); the totals per kind; the fingerprints held on more than one
    host (or root), with the bytes beyond one copy; leftovers; problems; and steps whose result
    differs between hosts. `ls --json` carries no call site: a step is matched across hosts by
    its parent fingerprint and operation, which only runs recorded by `cachetool run` give.

    The shards of one command and root form one set, whichever hosts ran them (a whole listing,
    without --shard, is a set of its own per host): a missing shard, a shard given twice (counted
    once) or shards of different counts are reported and exit 1.

    **Examples**

        cachetool verify --shard 3/8 --json > out/3.json    # in each of 8 jobs

        cachetool merge out/*.json

        cachetool merge node1-ls.json node2-ls.json --json

        cachetool merge out/*.json -q    # fingerprints held on several hosts

    Exit codes: 0 merged; 1 a shard set is incomplete or repeated, or a verify document found
    errors; 2 a file is not a cachetool ls or verify JSON document, or of an unknown version.
    """
    from cachetool.maintenance.fleet import merge_documents

    report = merge_documents(files)
    for s in report.shard_sets:
        for problem in s.problems():
            warn(f"{s.command} of {s.root} (on {', '.join(s.hosts)}): {problem}")
    if not out.emit(report.to_json, (d["fingerprint"] for d in report.duplicates)):
        render(out, report)
    return report.exit_code


def render(out: Output, report: FleetReport) -> None:
    """The human report: shard sets, hosts, totals, duplicates, leftovers, problems, differing steps."""
    from cachetool.formatting import human_size

    hosts = report.hosts
    out.line(f"Merged {len(report.documents)} document(s) from {len(hosts)} host(s)", style="bold")
    for s in report.shard_sets:
        n = s.counted
        state = "complete" if s.complete else "; ".join(s.problems())
        out.line(
            f"  {s.command} of {s.root} on {', '.join(s.hosts)}: {len(s.given)} of {n} shard(s), {state}",
            style=None if s.complete else "bold red",
        )
    out.line()
    rows = [
        (
            h["host"],
            f"{h['entries']:,}",
            f"{h['files']:,}",
            human_size(h["bytes"]),
            f"{h['entries_checked']:,}",
        )
        for h in hosts
    ]
    columns = [("host", "left"), ("entries", "right"), ("files", "right"), ("size", "right")]
    out.table(None, [*columns, ("verified", "right")], rows, whole=("host",))
    if report.totals:
        parts = [f"{k} {t['files']} file(s) {human_size(t['bytes'])}" for k, t in report.totals.items()]
        out.line("by kind: " + "; ".join(parts))
    out.line()
    extra = sum(d["extra_bytes"] for d in report.duplicates)
    out.line(
        f"Held in more than one place: {len(report.duplicates)} fingerprint(s), "
        f"{human_size(extra)} beyond one copy",
        style="bold",
    )
    for d in report.duplicates:
        out.line(f"  {d['fingerprint']}  {', '.join(d['hosts'])}  +{human_size(d['extra_bytes'])}")
    size = human_size(sum(int(x["size"] or 0) for x in report.leftovers))
    out.line(f"Leftovers: {len(report.leftovers)}, {size}", style="bold")
    if report.leftovers:
        room = max(20, out.width - max(len(x["host"]) for x in report.leftovers) - 36)
        cells = [
            (x["host"], x["kind"], human_size(int(x["size"] or 0)), out.path(str(x["path"]), room))
            for x in report.leftovers
        ]
        columns = [("host", "left"), ("kind", "left"), ("size", "right"), ("path", "left")]
        out.table(None, columns, cells, whole=("host", "kind"))
    c = report.counts
    out.line(
        f"Problems: {len(report.problems)} ({c['error']} error(s), {c['warning']} warning(s) from verify)",
        style="bold red" if c["error"] else "bold",
    )
    for p in report.problems:
        out.line(f"  {p['severity']:<8}{p['host']}  {p['problem']}")
        out.line(f"          {out.path(str(p['path']), out.width - 10)}", style="dim")
    out.line(
        f"Steps whose result differs between hosts: {len(report.differing_steps)} "
        "(matched by parent and operation; ls records no call site)",
        style="bold",
    )
    for step in report.differing_steps:
        made = "; ".join(f"{h}: {', '.join(fps)}" for h, fps in step["fingerprints"].items())
        out.line(f"  {step['operation']} of {step['parent']}: {made}")
