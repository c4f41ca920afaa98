"""Render a `ReportData` as one self-contained HTML page (Plotly's script embedded; nothing is
fetched when the page is viewed)."""

from __future__ import annotations

import html
import json
import os
from collections import defaultdict
from typing import Any

from cachetool.errors import MissingDependency
from cachetool.formatting import human_age, human_size, local_time
from cachetool.report.model import ReportData

#: One colour per kind, shared by the treemap and its legend.
KIND_COLOURS = {
    "root": "#f4f4f4",
    "dataset": "#dfe6ee",
    "source": "#4c78a8",
    "derived": "#72b7b2",
    "indices": "#54a24b",
    "shards": "#88d27a",
    "saved": "#b279a2",
    "arrow": "#9d755d",
    "temp": "#e45756",
    "incomplete-prepare": "#f58518",
    "incomplete-save": "#f58518",
    "lock": "#bab0ac",
    "download": "#eeca3b",
    "extracted": "#ff9da6",
    "metadata": "#d8d8d8",
    "unreadable": "#d62728",
    "other": "#c7c7c7",
}


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise MissingDependency("plotly", "install it with: pip install 'cachetool[report]'") from None
    return go


def _age(seconds: float | None) -> str:
    return "?" if seconds is None else human_age(seconds)


def treemap_figure(data: ReportData) -> Any:
    go = _plotly()
    tiles = data.tiles
    hover = []
    for t in tiles:
        parts = [html.escape(t.label), f"kind: {t.kind}", f"size: {human_size(t.size)}"]
        if t.rows is not None:
            parts.append(f"rows: {t.rows:,}")
        if t.age is not None:
            parts.append(f"last used: {_age(t.age)}")
        if t.fingerprint:
            parts.append(f"fingerprint: {t.fingerprint}")
        hover.append("<br>".join(parts))
    fig = go.Figure(
        go.Treemap(
            ids=[t.id for t in tiles],
            labels=[html.escape(t.label) for t in tiles],
            parents=[t.parent for t in tiles],
            values=[max(t.size, 0) for t in tiles],
            branchvalues="total",
            marker={"colors": [KIND_COLOURS.get(t.kind, "#c7c7c7") for t in tiles]},
            hovertext=hover,
            hoverinfo="text",
            maxdepth=3,
        )
    )
    fig.update_layout(margin={"t": 10, "l": 10, "r": 10, "b": 10}, height=520)
    return fig


def lineage_figure(data: ReportData) -> Any:
    go = _plotly()
    by_depth: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(data.nodes):
        by_depth[n.depth].append(i)
    pos: dict[str, tuple[float, float]] = {}
    for depth, members in by_depth.items():
        for row, i in enumerate(members):
            pos[data.nodes[i].fingerprint] = (float(depth), -float(row))
    ex: list[float | None] = []
    ey: list[float | None] = []
    for parent, child in data.edges:
        (x0, y0), (x1, y1) = pos[parent], pos[child]
        ex += [x0, x1, None]
        ey += [y0, y1, None]
    edges = go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#999", "width": 1}, hoverinfo="skip")
    nodes = go.Scatter(
        x=[pos[n.fingerprint][0] for n in data.nodes],
        y=[pos[n.fingerprint][1] for n in data.nodes],
        mode="markers+text",
        text=[html.escape(n.label) for n in data.nodes],
        textposition="top center",
        customdata=list(range(len(data.nodes))),
        hovertext=[html.escape(_node_hover(n.details)) for n in data.nodes],
        hoverinfo="text",
        marker={
            "size": 14,
            "color": [_node_colour(n.details) for n in data.nodes],
            "line": {"width": 1, "color": "#333"},
        },
    )
    fig = go.Figure([edges, nodes])
    fig.update_layout(
        showlegend=False,
        margin={"t": 10, "l": 10, "r": 10, "b": 10},
        height=max(300, 60 * max((len(m) for m in by_depth.values()), default=1)),
        xaxis={"visible": False},
        yaxis={"visible": False},
        clickmode="event",
        # A click picks the nearest node; by x alone it would pick the first of a column's nodes.
        hovermode="closest",
    )
    return fig


def _node_hover(d: Any) -> str:
    fn = d.get("function") or {}
    return f"{d.get('operation') or d.get('type')} {d.get('fingerprint')} {fn.get('qualname') or ''}".strip()


def _node_colour(d: Any) -> str:
    if d.get("deleted"):
        return "#bbbbbb"
    if d.get("misses") and not d.get("hits"):
        return "#e45756"
    if d.get("hits"):
        return "#54a24b"
    return "#4c78a8"


def site_figures(data: ReportData) -> tuple[Any, Any]:
    go = _plotly()
    sites: dict[str, list[Any]] = defaultdict(list)
    for r in data.site_runs:
        sites[r.site].append(r)
    rate = go.Figure()
    lost = go.Figure()
    for site, runs in sorted(sites.items()):
        when = [local_time(r.run_time) for r in runs]
        name = html.escape(site)
        rate.add_trace(
            go.Scatter(x=when, y=[100 * r.hit_rate for r in runs], mode="lines+markers", name=name)
        )
        lost.add_trace(go.Bar(x=when, y=[r.seconds_lost for r in runs], name=name))
    rate.update_layout(yaxis={"title": "hit rate (%)", "range": [-5, 105]}, height=320, margin={"t": 10})
    lost.update_layout(yaxis={"title": "seconds lost"}, barmode="stack", height=320, margin={"t": 10})
    return rate, lost


_SCRIPT = """
const details = JSON.parse(document.getElementById('step-data').textContent);
const cfg = {displaylogo: false, responsive: true};
for (const [id, fig] of Object.entries(JSON.parse(document.getElementById('figures').textContent))) {
  Plotly.newPlot(id, fig.data, fig.layout, cfg);
}
function showStep(i) {
  const d = details[i];
  const lines = [];
  lines.push((d.operation || d.type || '?') + '  ' + d.fingerprint);
  if (d.parents && d.parents.length) lines.push('parents: ' + d.parents.join(', '));
  if (d.function) lines.push('function: ' + (d.function.qualname || '?') + ' @ ' +
                             (d.function.file || '?') + ':' + (d.function.line || '?'));
  if (d.call_site) lines.push('called at: ' + (d.call_site.file || '?') + ':' + (d.call_site.line || '?'));
  const args = Object.entries(d.args || {});
  lines.push('arguments:' + (args.length ? '' : ' (none recorded)'));
  for (const [k, v] of args) lines.push('  ' + k + ' = ' + v);
  lines.push('runs: ' + d.runs + ', hits: ' + d.hits + ', misses: ' + d.misses +
             (d.cache ? ' (last: ' + d.cache + ')' : ''));
  const files = d.files || [];
  lines.push('files:' + (files.length ? '' : (d.in_memory ? ' none (in memory)' : ' none')));
  for (const f of files) lines.push('  ' + f.path + (f.exists ? '  ' + f.size + ' bytes' : '  (gone)'));
  if (d.deleted) lines.push(d.deleted);
  document.getElementById('step-details').textContent = lines.join('\\n');
}
const lineage = document.getElementById('lineage');
if (lineage && lineage.on) {
  lineage.on('plotly_click', ev => {
    const p = ev.points.find(p => p.customdata !== undefined);
    if (p) showStep(p.customdata);
  });
}
"""


def _json_in_script(obj: Any) -> str:
    """JSON that cannot end the <script> element it sits in."""
    return json.dumps(obj).replace("</", "<\\/").replace("<!--", "<\\!--")


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.note { color: #666; } code { background: #f2f2f2; padding: 0 .2em; }
#step-details { background: #f7f7f7; padding: .8em; white-space: pre-wrap; min-height: 3em; }
table { border-collapse: collapse; }
td, th { border: 1px solid #ddd; padding: .2em .5em; text-align: left; }
tr.error td { background: #fde8e8; } tr.warning td { background: #fff6e0; }
.legend span { margin-right: 1em; white-space: nowrap; }
.legend i { display: inline-block; width: .9em; height: .9em; margin-right: .3em; vertical-align: middle; }
"""

#: Shown where a section has nothing recorded to draw.
_NO_RUNS = (
    "<p class='note'>No runs recorded in this cache. Run your pipeline with "
    "<code>cachetool run script.py</code> to record its lineage.</p>"
)


def render_html(data: ReportData) -> str:
    """The whole page as one string."""
    figures = _figures(data)  # first: it says when plotly is missing
    from plotly.offline import get_plotlyjs

    root = html.escape(os.fsdecode(data.root))
    when = local_time(data.generated_at)
    size = human_size(sum(t.size for t in data.tiles if t.parent == ""))
    lineage_html = (
        "<div id='lineage'></div><pre id='step-details'>Click a step to see its arguments and files.</pre>"
        if data.nodes
        else _NO_RUNS
    )
    sites_html = (
        "<div id='hit-rate'></div><h3>Time lost to recomputation</h3><div id='time-lost'></div>"
        if data.site_runs
        else _NO_RUNS
    )
    legend = "".join(
        f"<span><i style='background:{c}'></i>{html.escape(k)}</span>"
        for k, c in KIND_COLOURS.items()
        if k not in ("root", "dataset")
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>cachetool report: {root}</title>
<style>{_STYLE}</style>
<script>{get_plotlyjs()}</script>
</head><body>
<h1>cachetool report</h1>
<p>Cache <code>{root}</code>: {data.dataset_count} dataset folder(s), {data.entry_count} entries, {size};
{len(data.nodes)} fingerprint(s) in the lineage graph. Made {when}.</p>
<h2>What takes the space</h2>
<div class="legend">{legend}</div>
<div id="treemap"></div>
<h2>Lineage of recorded runs</h2>
{lineage_html}
<h2>Hit rate per call site</h2>
{sites_html}
<h2>Leftovers and verify findings</h2>
{_problems_html(data)}
<script type="application/json" id="figures">{_json_in_script(figures)}</script>
<script type="application/json" id="step-data">{_json_in_script([n.details for n in data.nodes])}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def _figures(data: ReportData) -> dict[str, Any]:
    """The page's Plotly figures as JSON, by the id of the element that shows each."""
    _plotly()
    import plotly.io as pio

    figures: dict[str, Any] = {"treemap": json.loads(pio.to_json(treemap_figure(data)))}
    if data.nodes:
        figures["lineage"] = json.loads(pio.to_json(lineage_figure(data)))
    if data.site_runs:
        rate, lost = site_figures(data)
        figures["hit-rate"] = json.loads(pio.to_json(rate))
        figures["time-lost"] = json.loads(pio.to_json(lost))
    return figures


def _problems_html(data: ReportData) -> str:
    rows = "".join(
        f"<tr class='{html.escape(p.severity)}'><td>{html.escape(p.source)}</td>"
        f"<td>{html.escape(p.severity)}</td><td>{html.escape(p.path)}</td>"
        f"<td>{html.escape(p.what)}</td></tr>"
        for p in data.problems
    )
    return (
        "<table id='problems'><tr><th>from</th><th>severity</th><th>path</th><th>what</th></tr>"
        f"{rows}</table>"
        if data.problems
        else "<p id='problems' class='note'>No leftovers and no verify findings.</p>"
    )


def write_page(data: ReportData, output: str | os.PathLike[str]) -> int:
    """Write the page to `output` (atomically: a partial page never replaces a good one) and
    return its size in bytes."""
    # A file name that is not UTF-8 holds surrogate-escaped bytes: shown escaped (`\udce9`).
    text = render_html(data).encode("utf-8", "backslashreplace")
    out = os.fspath(output)
    tmp = f"{out}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(text)
    os.replace(tmp, out)
    return len(text)
