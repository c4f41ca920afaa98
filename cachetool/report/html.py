"""Render a `ReportData` as one self-contained HTML page (`page.html`): inline SVG drawn here (a
squarified treemap, a layered lineage graph, a grid of hit rates per call site and run, bars of
time lost) and a small script for the search box and the step details (`page.js`). Nothing is
fetched when the page is viewed, and the page stays small (no chart library)."""

from __future__ import annotations

import html
import json
import os
import string
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cachetool.errors import CachetoolError
from cachetool.formatting import human_age, human_size, local_time, safe_text, short_duration
from cachetool.report.data import ReportData, Tile, build_report

#: One colour per kind, shared by the treemap and its legend.
KIND_COLOURS = {
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
#: The page (a `string.Template`, its style inline) and the script of its search box and details.
PAGE = ("page.html", "page.js")
#: A linear chain of at least this many steps is drawn as one box.
MIN_CHAIN = 3
BOX_W, BOX_H, ROW_H, GAP_X = 210, 22, 30, 46


def _s(text: object) -> str:
    """Any text for the page: control characters (a newline inside a file name too) and the
    undecodable bytes of file names made visible as in the terminal, then HTML-escaped. Text of
    several lines (a tooltip) is given as a list of lines."""
    lines = text if isinstance(text, list) else [text]
    return html.escape("\n".join(safe_text(str(line)) for line in lines))


def _safe(obj: Any) -> Any:
    """`obj` (JSON data) with every string made safe as `_s` does, before HTML escaping."""
    if isinstance(obj, str):
        return safe_text(obj)
    if isinstance(obj, dict):
        return {safe_text(str(k)): _safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_safe(v) for v in obj]
    return obj


def _squarify(sizes: Sequence[float], x: float, y: float, w: float, h: float) -> list[tuple[float, ...]]:
    """Rectangles (x, y, w, h) for `sizes` (largest first, all > 0) that fill the box, laid in rows
    along its shorter side, each row grown while that makes its worst aspect ratio no worse
    (Bruls, Huizing and van Wijk's squarified treemap)."""
    scale = w * h / sum(sizes)
    areas = [s * scale for s in sizes]

    def worst(total: float, big: float, small: float, side: float) -> float:
        thick = total / side
        return max(thick * thick / small, big / (thick * thick))

    rects: list[tuple[float, ...]] = []
    i = 0
    while i < len(areas):
        side, j, total = max(min(w, h), 1e-9), i + 1, areas[i]
        while j < len(areas) and worst(total + areas[j], areas[i], areas[j], side) <= worst(
            total, areas[i], areas[j - 1], side
        ):
            total += areas[j]
            j += 1
        thick, along = total / side, 0.0
        for a in areas[i:j]:
            rects.append((x, y + along, thick, a / thick) if w >= h else (x + along, y, a / thick, thick))
            along += a / thick
        x, w, y, h = (x + thick, w - thick, y, h) if w >= h else (x, w, y + thick, h - thick)
        i = j
    return rects


def _fit(text: str, width: float, char: float = 6.8) -> str:
    """`text` cut to what `width` pixels hold (at `char` pixels a character), or "" if nothing."""
    n = int(width / char)
    return text if len(text) <= n else (text[: n - 1] + "…" if n > 3 else "")


def _tile_title(t: Tile) -> list[str]:
    parts = [t.label, f"kind: {t.kind}", f"size: {human_size(t.size)}"]
    if t.rows is not None:
        parts.append(f"rows: {t.rows:,}")
    if t.age is not None:
        parts.append(f"last used: {human_age(t.age)}")
    if t.fingerprint:
        parts.append(f"fingerprint: {t.fingerprint}")
    return parts


def treemap_svg(data: ReportData, width: int = 1200, height: int = 520) -> str:
    """The cache's space as nested rectangles: a box per dataset folder (entries at the top of the
    root gathered in one), inside it a rectangle per entry coloured by kind."""
    root = data.tree
    loose = [t for t in root.children if t.kind != "dataset" and t.size > 0]
    folders: list[tuple[str, list[str], list[Tile]]] = [
        (t.label, _tile_title(t), [c for c in t.children if c.size > 0])
        for t in root.children
        if t.kind == "dataset"
    ]
    if loose and root.kind == "dataset":  # the root is a saved folder
        folders.append((root.label, _tile_title(root), loose))
    elif loose:
        folders.append(("(top of the cache)", ["entries at the top of the cache"], loose))
    folders = sorted((f for f in folders if f[2]), key=lambda f: -sum(c.size for c in f[2]))
    if not folders:
        return "<p class='note'>Nothing in the cache takes space.</p>"
    out = [f"<svg viewBox='0 0 {width} {height}' width='100%' role='img'>"]
    rects = _squarify([sum(c.size for c in f[2]) for f in folders], 0, 0, width, height)
    for (label, title, entries), (x, y, w, h) in zip(folders, rects, strict=True):
        out.append(
            f"<g class='folder'><title>{_s(title)}</title>"
            f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' fill='#dfe6ee' stroke='#fff'/>"
        )
        # The folder's name along its longer side (a small folder is a thin strip), if it has room.
        top, side = (18, 0) if w >= h and h > 40 else (0, 18) if w > 16 and h > 60 else (0, 0)
        if top:
            out.append(f"<text x='{x + 4:.1f}' y='{y + 13:.1f}' class='fl'>{_s(_fit(label, w - 8))}</text>")
        elif side:
            out.append(
                f"<text transform='translate({x + 5:.1f} {y + 4:.1f}) rotate(90)' class='fl'>"
                f"{_s(_fit(label, h - 8))}</text>"
            )
        entries = sorted(entries, key=lambda c: -c.size)
        # Entries too small to see become one rectangle: a page of 100,000 slivers says nothing.
        least = sum(c.size for c in entries) * 16 / (w * h)
        small = [c for c in entries if c.size < least]
        if len(small) > 1:
            rest = Tile(f"{len(small)} smaller entries", sum(c.size for c in small), "other")
            entries = sorted([*entries[: len(entries) - len(small)], rest], key=lambda c: -c.size)
        inner = (x + side + 2, y + top + 1, max(w - side - 4, 1.0), max(h - top - 3, 1.0))
        for c, (ex, ey, ew, eh) in zip(entries, _squarify([c.size for c in entries], *inner), strict=True):
            out.append(
                f"<g><title>{_s(_tile_title(c))}</title><rect x='{ex:.1f}' y='{ey:.1f}' width='{ew:.1f}' "
                f"height='{eh:.1f}' fill='{KIND_COLOURS.get(c.kind, '#c7c7c7')}' stroke='#fff'/>"
            )
            text = _fit(c.label, ew - 6) if eh > 15 else ""
            if text:
                out.append(f"<text x='{ex + 3:.1f}' y='{ey + 12:.1f}'>{_s(text)}</text>")
            out.append("</g>")
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _groups(data: ReportData) -> tuple[list[list[int]], list[set[int]]]:
    """The boxes of the lineage graph, each a list of step indexes: one step, or a linear chain of
    at least `MIN_CHAIN` steps (each the only child of the one before, which is its only parent);
    and per box, the boxes its steps come from."""
    index = {n.fingerprint: i for i, n in enumerate(data.nodes)}
    parents: list[list[int]] = [[] for _ in data.nodes]
    kids: list[list[int]] = [[] for _ in data.nodes]
    for p, c in sorted(set(data.edges)):
        if p != c:
            parents[index[c]].append(index[p])
            kids[index[p]].append(index[c])

    def follows(i: int) -> bool:  # i continues its parent's chain
        return len(parents[i]) == 1 and len(kids[parents[i][0]]) == 1

    groups: list[list[int]] = []
    placed: set[int] = set()
    for i in range(len(data.nodes)):
        if follows(i):
            continue  # drawn with the chain of its parent
        chain = [i]
        while len(kids[chain[-1]]) == 1 and follows(kids[chain[-1]][0]):  # never back to its head
            chain.append(kids[chain[-1]][0])
        groups += [chain] if len(chain) >= MIN_CHAIN else [[j] for j in chain]
        placed.update(chain)
    groups += [[i] for i in range(len(data.nodes)) if i not in placed]  # a cycle has no head
    box = {i: g for g, members in enumerate(groups) for i in members}
    from_boxes = [{box[p] for i in members for p in parents[i]} - {g} for g, members in enumerate(groups)]
    return groups, from_boxes


def _layers(from_boxes: list[set[int]]) -> list[list[int]]:
    """Boxes by layer (the longest path from a source, in Kahn's order without recursion: a chain
    may be thousands of steps long; a box on a cycle keeps what its other parents gave it), ordered
    within each layer by the mean position of their parents, then of their children, a few sweeps
    each way (fewer crossings)."""
    kids: list[list[int]] = [[] for _ in from_boxes]
    for g, ps in enumerate(from_boxes):
        for p in ps:
            kids[p].append(g)
    waiting = [len(ps) for ps in from_boxes]
    layer = [0] * len(from_boxes)
    ready = [g for g, n in enumerate(waiting) if n == 0]
    for g in ready:  # the list grows while it is read
        for k in kids[g]:
            layer[k] = max(layer[k], layer[g] + 1)
            waiting[k] -= 1
            if waiting[k] == 0:
                ready.append(k)
    layers: list[list[int]] = [[] for _ in range(max(layer, default=-1) + 1)]
    for g in range(len(from_boxes)):
        layers[layer[g]].append(g)
    pos = {g: i for members in layers for i, g in enumerate(members)}

    def by_mean(members: list[int], near: list[Any]) -> None:
        members.sort(key=lambda g: sum(pos[o] for o in near[g]) / len(near[g]) if near[g] else pos[g])
        pos.update({g: i for i, g in enumerate(members)})

    for _ in range(4):
        for members in layers[1:]:
            by_mean(members, from_boxes)
        for members in layers[-2::-1]:
            by_mean(members, kids)
    return layers


def _colour(d: Mapping[str, Any]) -> str:
    if d.get("deleted"):
        return "#bbbbbb"
    if d.get("misses") and not d.get("hits"):
        return "#e45756"
    return "#54a24b" if d.get("hits") else "#4c78a8"


def lineage_svg(data: ReportData, groups: list[list[int]], from_boxes: list[set[int]]) -> str:
    """The lineage graph: layers left to right, a box per step or chain (its first step's label and
    `+N` more), each placed level with its parents where the layer leaves room."""
    ys: dict[int, float] = {}
    xs: dict[int, float] = {}
    for n, members in enumerate(_layers(from_boxes)):
        last = -float(ROW_H)
        for g in members:
            want = sum(ys[p] for p in from_boxes[g] if p in ys) / max(1, sum(p in ys for p in from_boxes[g]))
            ys[g] = last = max(want, last + ROW_H)
            xs[g] = 10 + n * (BOX_W + GAP_X)
    width = max(xs.values(), default=0) + BOX_W + 20
    height = max(ys.values(), default=0) + BOX_H + 20
    out = [f"<svg width='{width:.0f}' height='{height:.0f}'><g transform='translate(0 10)'>"]
    for g, ps in enumerate(from_boxes):
        for p in ps:
            x1, y1, x2, y2 = xs[p] + BOX_W, ys[p] + BOX_H / 2, xs[g], ys[g] + BOX_H / 2
            out.append(
                f"<path d='M{x1:.0f},{y1:.0f} C{x1 + GAP_X / 2:.0f},{y1:.0f} {x2 - GAP_X / 2:.0f},{y2:.0f} "
                f"{x2:.0f},{y2:.0f}'/>"
            )
    for g, members in enumerate(groups):
        first, last_step = data.nodes[members[0]], data.nodes[members[-1]]
        op, fp = first.operation, first.fingerprint[:8]
        more = f" +{len(members) - 1}" if len(members) > 1 else ""
        label = f"{op[: int((BOX_W - 12) / 7.3) - len(fp) - len(more) - 1]} {fp}{more}"  # what the box holds
        title = ""
        if len(members) > 1:
            ops: dict[str, int] = defaultdict(int)
            for i in members:
                ops[data.nodes[i].operation] += 1
            steps = ", ".join(o if k == 1 else f"{k} × {o}" for o, k in ops.items())
            title = f"<title>{len(members)} steps: {_s(steps)}</title>"
        out.append(
            f"<g class='node' data-g='{g}' tabindex='0' transform='translate({xs[g]:.0f} {ys[g]:.0f})'>"
            f"{title}<rect width='{BOX_W}' height='{BOX_H}' rx='4' fill='{_colour(last_step.details)}'/>"
            f"<text x='6' y='15'>{_s(label)}</text></g>"
        )
    out.append("</g></svg>")
    return "".join(out)


def sites_svg(data: ReportData) -> tuple[str, str]:
    """The hit rate of each call site in each run (a row per call site, a cell per run: green when
    every call hit the cache, red when every call computed) and the seconds lost per run (a bar per
    run, under the same columns)."""
    runs = sorted({r.run_time for r in data.site_runs})
    col = {t: i for i, t in enumerate(runs)}
    sites: dict[str, list[Any]] = defaultdict(list)
    for r in data.site_runs:
        sites[r.site].append(r)
    left = min(360, 10 + 7 * max(len(safe_text(s)) for s in sites))
    cell = max(4.0, min(22.0, 900 / len(runs)))
    out = [f"<svg width='{left + cell * len(runs) + 90:.0f}' height='{24 * len(sites) + 24}'>"]
    out += [
        f"<text x='{left + cell * i + cell / 2:.0f}' y='12' text-anchor='middle'>{i + 1}</text>"
        for i in range(len(runs))
        if cell >= 18 or i % 10 == 0
    ]
    lost = [0.0] * len(runs)
    why: list[list[str]] = [[] for _ in runs]
    for row, (site, rows) in enumerate(sorted(sites.items())):
        y = 20 + 24 * row
        label = _s(_fit(site, left - 10))
        out.append(f"<g class='site'><text x='{left - 8}' y='{y + 15}' text-anchor='end'>{label}</text>")
        for r in rows:
            i = col[r.run_time]
            tip = [
                site,
                f"run {i + 1}, {local_time(r.run_time)}: {r.hits} hit(s), {r.misses} miss(es), "
                f"{short_duration(r.seconds_computing)} computing, {short_duration(r.seconds_lost)} lost",
            ]
            out.append(
                f"<rect x='{left + cell * i:.1f}' y='{y}' width='{cell - 2:.1f}' height='20' "
                f"fill='hsl({120 * r.hit_rate:.0f},55%,50%)'><title>{_s(tip)}</title></rect>"
            )
            lost[i] += r.seconds_lost
            if r.seconds_lost:
                why[i].append(f"{site}: {short_duration(r.seconds_lost)}")
        total = short_duration(sum(r.seconds_lost for r in rows))
        out.append(f"<text x='{left + cell * len(runs) + 6:.0f}' y='{y + 15}'>{total} lost</text></g>")
    out.append("</svg>")
    if not any(lost):
        return "".join(
            out
        ), "<p class='note'>No time lost: no call site computed what an earlier run had.</p>"
    top = max(lost)
    bars = [f"<svg width='{left + cell * len(runs) + 90:.0f}' height='130'>"]
    bars.append(f"<text x='{left - 8}' y='14' text-anchor='end'>{short_duration(top)}</text>")
    bars.append(f"<text x='{left - 8}' y='115' text-anchor='end'>0</text>")
    for i, s in enumerate(lost):
        h = 100 * s / top
        tip = [f"run {i + 1}, {local_time(runs[i])}: {short_duration(s)} lost", *why[i]]
        bars.append(
            f"<rect x='{left + cell * i:.1f}' y='{110 - h:.1f}' width='{cell - 2:.1f}' height='{h:.1f}' "
            f"fill='#e45756'><title>{_s(tip)}</title></rect>"
        )
    bars.append("</svg>")
    return "".join(out), "".join(bars)


def _json_in_script(obj: Any) -> str:
    """JSON that cannot end the <script> element it sits in."""
    return json.dumps(obj).replace("</", "<\\/").replace("<!--", "<\\!--")


#: Shown where a section has nothing recorded to draw.
_NO_RUNS = (
    "<p class='note'>No runs recorded in this cache. Run your pipeline with "
    "<code>cachetool run script.py</code> to record its lineage.</p>"
)


def render_html(data: ReportData) -> str:
    """The whole page as one string."""
    root = _s(os.fsdecode(data.root))
    size = human_size(data.size)
    groups, from_boxes = _groups(data)
    lineage_html = (
        "<p class='note'>Left to right from the sources; a chain of steps is one box (<code>+N</code> "
        "more steps: click it to list them). Green: hit in some run; red: computed every time; grey: "
        "deleted.</p><input id='search' type='search' "
        "placeholder='Search a fingerprint, operation or function'> "
        f"<span id='search-count' class='note'></span><div id='lineage' class='scroll'>"
        f"{lineage_svg(data, groups, from_boxes)}</div><div id='step-list'></div>"
        "<pre id='step-details'>Click a step to see its arguments and files.</pre>"
        if data.nodes
        else _NO_RUNS
    )
    sites_html = _NO_RUNS
    if data.site_runs:
        rate, lost = sites_svg(data)
        sites_html = (
            "<p class='note'>A row per call site, a column per run (oldest first): green when every "
            "call hit the cache, red when every call computed.</p>"
            f"<div id='hit-rate' class='scroll'>{rate}</div>"
            "<h3>Time lost to recomputation</h3><p class='note'>Per run: what the misses took at call "
            f"sites an earlier run had already computed.</p><div id='time-lost' class='scroll'>{lost}</div>"
        )
    legend = "".join(f"<span><i style='background:{c}'></i>{k}</span>" for k, c in KIND_COLOURS.items())
    steps = {"steps": _safe([n.details for n in data.nodes]), "groups": groups}
    page, script = (Path(__file__).with_name(name).read_text(encoding="utf-8") for name in PAGE)
    return string.Template(page).substitute(
        root=root,
        datasets=data.dataset_count,
        entries=data.entry_count,
        size=size,
        nodes=len(data.nodes),
        made=local_time(data.generated_at),
        legend=legend,
        treemap=treemap_svg(data),
        lineage=lineage_html,
        sites=sites_html,
        problems=_problems_html(data),
        steps=_json_in_script(steps),
        script=script if data.nodes else "",
    )


def _problems_html(data: ReportData) -> str:
    root = os.fsdecode(data.root).rstrip("/") + "/"
    rows = "".join(
        f"<tr class='{_s(p.severity)}'><td>{_s(p.source)}</td><td>{_s(p.severity)}</td>"
        f"<td title='{_s(p.path)}'>{_s(p.path.removeprefix(root))}</td><td>{_s(p.what)}</td></tr>"
        for p in data.problems
    )
    return (
        "<table id='problems'><tr><th class='narrow'>from</th><th class='narrow'>severity</th>"
        f"<th class='path'>path (in the cache)</th><th>what</th></tr>{rows}</table>"
        if data.problems
        else "<p id='problems' class='note'>No leftovers and no verify findings.</p>"
    )


def write_report(
    root: str | os.PathLike[str], output: str | os.PathLike[str] = "report.html", *, verify: bool = True
) -> tuple[ReportData, int]:
    """Build the report of the cache `root` and write it to `output` (replaced if it exists, never
    left half-written); return the data and the page's size in bytes. `verify=False` leaves out
    verify's findings (faster on a large cache). Mirrors `cachetool report [--output FILE]
    [--no-verify]`.

    Raises `CachetoolError` when `output` cannot be written (its folder missing, no permission)."""
    out = os.fspath(output)
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        raise CachetoolError(f"cannot write {out}: folder {folder} does not exist")
    data = build_report(root, verify=verify)
    # A file name that is not UTF-8 holds surrogate-escaped bytes: shown escaped (`\udce9`).
    text = render_html(data).encode("utf-8", "backslashreplace")
    tmp = f"{out}.tmp-{os.getpid()}"
    try:  # a partial page never replaces a good one
        with open(tmp, "wb") as f:
            f.write(text)
        os.replace(tmp, out)
    except OSError as e:
        raise CachetoolError(f"cannot write {out}: {e.strerror or e}") from None
    return data, len(text)
