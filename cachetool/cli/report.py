"""`cachetool report`: a picture of the cache in one self-contained HTML file."""

from __future__ import annotations

import os
from pathlib import Path

from cachetool.cli.common import CACHE_DIR, OUTPUT, command, opt
from cachetool.cli.output import Output, warn


@command(
    output=opt(
        "--output",
        "-o",
        help="The HTML file to write (replaced if it exists).",
        type=Path,
        default=Path("report.html"),
        dir_okay=False,
    ),
    no_verify=opt("--no-verify", help="Leave out verify's findings (faster on a large cache)."),
    cache_dir=CACHE_DIR,
    **OUTPUT,
)
def report_command(output: Path, no_verify: bool, cache_dir: Path | None, out: Output) -> None:
    """Write one self-contained HTML page that pictures the cache.

    The page holds a treemap of the cache by dataset folder and entry (size, kind, age), the
    lineage graph of the runs recorded by `cachetool run` (linear chains drawn as one box, a
    search box for fingerprints; click a step to see its arguments, files, hits and misses), the
    hit rate per call site and run, the time lost to recomputation per run, and the leftovers and
    verify findings. Plain HTML and SVG, nothing to install: the page opens with no network.

    **Examples**

        cachetool report

        cachetool report -o /tmp/cache.html --cache-dir /data/hf/datasets

        cachetool report --no-verify -q

    Exit codes: 0 written; 2 usage (missing cache, output not writable).
    """
    from cachetool.cache.locations import existing_root
    from cachetool.formatting import human_size, safe_text
    from cachetool.report.html import write_report

    data, size = write_report(existing_root(cache_dir), output, verify=not no_verify)
    path = os.path.abspath(output)
    warn(*map(safe_text, data.warnings[:5]))  # one line each: a newline in a name starts none
    if not out.emit(lambda: {"output": path, "bytes": size, **data.to_json()}, [path]):
        out.line(
            f"Wrote {path} ({human_size(size)}): {data.dataset_count} dataset folder(s), "
            f"{data.entry_count} entries, {len(data.nodes)} fingerprint(s) in the lineage graph, "
            f"{len(data.problems)} problem(s)."
        )
