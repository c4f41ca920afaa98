"""`cachetool report`: one self-contained HTML page that pictures a cache (a treemap of what takes
the space, the lineage of recorded runs, hit rate and time lost per call site, leftovers and
verify findings). `build_report` gathers the data; `write_report` renders it with Plotly."""

from __future__ import annotations

from cachetool.report.model import ReportData, build_report

__all__ = ["ReportData", "build_report", "report"]


def report(root: str, output: str = "report.html", *, verify: bool = True) -> tuple[ReportData, int]:
    """Build the report of the cache `root` and write it to `output`; return the data and the
    page's size in bytes. Mirrors `cachetool report --output FILE [--no-verify]`."""
    from cachetool.report.html import write_report

    data = build_report(root, verify=verify)
    return data, write_report(data, output)
