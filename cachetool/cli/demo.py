"""`cachetool demo`: build a small real cache and list it."""

from __future__ import annotations

import os
from pathlib import Path

from cachetool.cli.common import arg, command
from cachetool.cli.output import Output, OutputFormat, hint


@command(
    folder=arg("Where to build the demo (default: a new temporary folder).", Path | None, show_default=False)
)
def demo_command(folder: Path | None) -> None:
    """Build a small real `datasets` cache from generated data, then list it.

    Writes a CSV file and a pipeline script into FOLDER and runs the pipeline with the real
    `datasets` library, with `HF_DATASETS_CACHE` set to FOLDER/cache — never your real cache:
    a csv load, two maps, a filter, a shuffle, a `num_proc=2` map and a `save_to_disk`. Then shows
    `cachetool ls` of the result. The pipeline runs under `cachetool run`, so the demo ends with
    the recorded lineage of its final dataset and what `cachetool gc --temp --dry-run` would
    remove. Needs `datasets`: `pip install "cachetool[datasets]"`.

    **Examples**

        cachetool demo

        cachetool demo ./demo && cachetool ls ./demo/cache --json

    Exit codes: 0 built and listed; 2 `datasets` not installed, or the pipeline failed.
    """
    import tempfile  # (not at import: `cachetool --help` imports every command's module)

    from cachetool.cache.roots import forget_roots, known_roots

    target = folder if folder is not None else Path(tempfile.mkdtemp(prefix="cachetool-demo-"))
    before = set(known_roots())
    try:
        _show_demo(target)
    finally:
        # Its traced pipeline registered the demo's caches (its lineage finds the saved copy
        # through the registry); once the demo is over, `cachetool dirs` does not list them.
        inside = os.path.realpath(target) + os.sep
        forget_roots(p for p in set(known_roots()) - before if (p + os.sep).startswith(inside))


def _show_demo(target: Path) -> None:
    from cachetool.cache.scan import scan_cache
    from cachetool.cli.ls import live_in, recorded_usage, render_human, report_warnings
    from cachetool.demo_cache import build_demo

    out = Output(OutputFormat.human)
    out.line(f"Building a demo cache in {target} with the real datasets library…")
    demo = build_demo(target, traced=True)
    report = scan_cache(demo.cache_dir, usage=recorded_usage(demo.cache_dir), liveness=live_in)
    render_human(out, report, list(report.entries))
    report_warnings(report)
    if demo.final_fingerprint:
        from cachetool.cli.lineage import render as render_lineage
        from cachetool.history.lineage_view import lineage_view

        out.line()
        render_lineage(out, lineage_view(report, demo.final_fingerprint))
    from cachetool.cli.gc import show_plan
    from cachetool.maintenance.gc import GcOptions
    from cachetool.maintenance.gc.plan import plan_gc

    out.line()
    out.line("What `cachetool gc --temp --dry-run` would remove (leftovers of killed runs):", style="bold")
    show_plan(out, plan_gc(demo.cache_dir, GcOptions(temp=True)), dry_run=True, final=True)
    out.line()
    hint(f"explore it: cachetool show {demo.final_fingerprint[:8]} --cache-dir {demo.cache_dir}")
    hint(f"the pipeline that made it: {demo.script}; the saved copy: {demo.folder / 'saved' / 'reviews'}")
