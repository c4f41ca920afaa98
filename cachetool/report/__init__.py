"""`cachetool report`: one self-contained HTML page that pictures a cache (a treemap of what takes
the space, the lineage of recorded runs, hit rate and time lost per call site, leftovers and
verify findings). `build_report` gathers the data; `write_report` gathers and writes it
(`html.write_page` draws the data as inline SVG: no chart library, nothing fetched).

A command layer: may import `maintenance`, `trace`, `history`, `cache`, `fingerprint` and the base
modules; not `cli`, `determinism` or `demo`.
"""

from __future__ import annotations

import os

from cachetool.errors import CachetoolError
from cachetool.report.model import ReportData, build_report

__all__ = ["ReportData", "build_report", "report", "write_report"]


def write_report(
    root: str | os.PathLike[str], output: str | os.PathLike[str] = "report.html", *, verify: bool = True
) -> tuple[ReportData, int]:
    """Build the report of the cache `root` and write it to `output` (replaced if it exists, never
    left half-written); return the data and the page's size in bytes. `verify=False` leaves out
    verify's findings (faster on a large cache). Mirrors `cachetool report [--output FILE]
    [--no-verify]`.

    Raises `CachetoolError` when `output` cannot be written (its folder missing, no permission)."""
    from cachetool.report.html import write_page

    folder = os.path.dirname(os.fspath(output)) or "."
    if not os.path.isdir(folder):
        raise CachetoolError(f"cannot write {os.fspath(output)}: folder {folder} does not exist")
    data = build_report(root, verify=verify)
    try:
        size = write_page(data, output)
    except OSError as e:
        raise CachetoolError(f"cannot write {os.fspath(output)}: {e.strerror or e}") from None
    return data, size


#: The first name of `write_report` (docs written before it was exported from `cachetool`).
report = write_report
