"""`cachetool lineage`: where a fingerprint comes from, and what was made from it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.cli.common import ALL_ROOTS, CACHE_DIR, REQUIRED, arg, command, opt, output
from cachetool.cli.output import Output, OutputFormat, hint, warn

if TYPE_CHECKING:
    from cachetool.history.graph import Step
    from cachetool.history.lineage_view import LineageView


@command(
    fingerprint=arg("A fingerprint or a unique prefix of one.", default=REQUIRED),
    descendants=opt("--descendants", "-d", help="Show the tree of what was made from it."),
    all=opt("--all", "-a", help="Show the whole forest of its dataset (every branch)."),
    internal=opt("--internal", help="Include calls datasets makes itself (set_format, shards)."),
    cache_dir=CACHE_DIR,
    all_roots=ALL_ROOTS,
    **output("dot", "mermaid", quiet="the steps' fingerprints, one a line"),
)
def run_lineage(fingerprint: str, cache_dir: Path | None, out: Output, **options: bool) -> None:
    """Show where a fingerprint comes from: the chain of recorded steps from its source.

    One step a line: operation, function (name @ file:line), key arguments, fingerprint, how many
    recorded runs hit or missed the cache, and whether its cache file exists now (size) or is gone.
    Steps that write no file (select with a list, remove_columns, in-memory datasets) say so. Only
    this cache's records count (another cache's runs of the same pipeline are not its hits), but a
    parent in another root (the cache a saved folder came from) is followed through the registry
    of known roots, and the saved folders made from this cache are followed too; such steps say
    "recorded in <root>". `--all-roots` reads every known root. A file written by a call
    `datasets` makes itself (`cast_column` runs `map`) keeps its step, marked as such. Lineage
    exists only for pipelines run under `cachetool run` (or `cachetool.tracing()`); for other
    entries it says what the disk tells.

    **Examples**

        cachetool lineage 7a5731241fa9ef8b

        cachetool lineage 7a57 --descendants

        cachetool lineage 7a57 --all --format dot | dot -Tsvg > lineage.svg

        cachetool lineage 7a57 --format mermaid

    Exit codes: 0 shown (even when no parent is recorded); 2 unknown or ambiguous fingerprint,
    or missing cache.
    """
    from cachetool.cache.locations import root_for
    from cachetool.cache.walk import gc_paused
    from cachetool.history.lineage_view import lineage

    with gc_paused(freeze=True):  # a long ledger's records make many objects and no cycles
        root = root_for(fingerprint, cache_dir)
        view = lineage(root, fingerprint, **options)
    if out.format == OutputFormat.dot:
        sys.stdout.write(to_dot(view))
    elif out.format == OutputFormat.mermaid:
        sys.stdout.write(to_mermaid(view))
    elif not out.emit(view.to_json, (s.fingerprint for _, s in view.steps)):
        render(out, view)
    warn(*view.warnings)
    if not view.recorded and view.unended is None:
        how = "`cachetool run pipeline.py` (a step it loads from the cache too), or `cachetool.tracing()`"
        hint(f"lineage is recorded while a pipeline runs: {how}")
        # What gc evicts when named; a source or a saved dataset is the user's to remove.
        if view.entry is not None and view.entry.kind.value in ("derived", "indices", "shards"):
            from cachetool.hints import gc_command

            remove = gc_command(os.path.abspath(root), view.entry.fingerprint or view.fingerprint)
            hint(f"an entry no such run makes again (one check-determinism wrote) goes with `{remove}`")


# ------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------


def _what(step: Step) -> str:
    if not step.recorded:
        return "?"
    op = step.operation or step.type or "?"
    src = step.source
    if step.type == "root" and src is not None and src.kind == "builder":
        return f"{op} {src.builder} [{src.split}]"
    if step.type == "root" and src is not None and src.kind == "saved":
        return f"{op} {Path(str(src.path)).name}"
    return op


def _runs(step: Step) -> str:
    if not step.recorded:
        return ""
    parts = []
    if step.misses:
        parts.append(f"{step.misses} miss" + ("es" if step.misses > 1 else ""))
    if step.hits:
        parts.append(f"{step.hits} hit" + ("s" if step.hits > 1 else ""))
    return ", ".join(parts) or f"{step.runs} run" + ("s" if step.runs != 1 else "")


def _notes(step: Step) -> str:
    rf, rec = step.random_fallback, step.record
    notes = [
        "new_fingerprint= given" if step.fingerprint_given else "",
        f"random fingerprint: {rf.argument or 'the transform'} could not be hashed ({rf.error})"
        if rf
        else "",
        "made inside another step by datasets" if step.internal else "",
        f"recorded in {step.root}" if step.foreign and step.root else "",
        *(f"saved to {path}" for path in step.saved_to),
        step.deleted or "",
        step.where or "",
        # what its latest run gave back: the rows it resumed, the result it re-keyed
        *(p.text for p in ((rec.resumed, rec.rekeyed) if rec else ()) if p is not None),
    ]
    return "; ".join(n for n in notes if n)


def _parts(step: Step) -> list[str]:
    """What the step did: `map`, `upper @ pipeline.py:21`, `batched=True` (those it has)."""
    return [x for x in (_what(step), step.function_str, step.args_str) if x]


def _unended(view: LineageView) -> str | None:
    """What made the fingerprint no record explains: a step of a run killed in it, or that raised."""
    start = view.unended
    if start is None:
        return None
    site = start.call_site
    at = f" @ {Path(site.file or '?').name}:{site.line}" if site is not None else ""
    made = f"made by {start.operation or 'a step'}{at} in run {start.run}"
    if view.failed is not None:
        return f"{made}, which raised in that step ({view.failed})"
    return f"{made}, which was killed in that step (its record was never written)"


def step_line(step: Step, stale: str | None = None, unended: str | None = None) -> str:
    """`map  upper @ pipeline.py:21  batched=True  ->  5f0c…  1.5 kB  (1 miss, 2 hits)`, with
    `[stale: …]` when the entry is stale."""
    from cachetool.history.graph import NOT_RECORDED

    if not step.recorded:
        return f"{step.fingerprint}  {unended or NOT_RECORDED}"
    tail = f"{step.fingerprint}  {step.file_str}"
    runs = _runs(step)
    if runs:
        tail += f"  ({runs})"
    notes = "; ".join(x for x in (stale, _notes(step)) if x)
    if notes:
        tail += f"  [{notes}]"
    return "  ".join(_parts(step)) + "  ->  " + tail


def render(out: Output, view: LineageView) -> None:
    from cachetool.history.graph import NOT_RECORDED

    title = {"chain": "Lineage of", "descendants": "Descendants of", "all": "Lineage forest of"}[view.mode]
    out.line(f"{title} {view.fingerprint}", style="bold")
    for number, (depth, s) in enumerate(view.steps, 1):
        prefix = f"{number:>3}. " if view.mode == "chain" else "  " * (depth + 1) + ("└ " if depth else "")
        mark = "* " if s.fingerprint == view.fingerprint and view.mode == "all" else ""
        stale = view.stale_note(s.fingerprint)
        unended = _unended(view) if s.fingerprint == view.fingerprint else None
        line = step_line(s, stale, unended)
        out.line(prefix + mark + line, style="bold" if mark else "yellow" if stale else None)
    if not view.recorded:
        e = view.entry
        if e is not None:
            out.line("")
            if e.kind.value == "source":
                # A prepared split starts every chain: nothing comes before it, recorded or not.
                out.line(f"{view.fingerprint}: a source split, the start of its chains (no run recorded)")
            else:
                out.line(f"{view.fingerprint}: {_unended(view) or NOT_RECORDED}")
            facts = (("kind", e.kind_str), ("dataset", e.dataset), ("split", e.split), ("content", e.content))
            out.line("On disk: " + ", ".join([*(f"{k} {v}" for k, v in facts if v), f"size {e.size_str}"]))
            out.line(f"Path: {e.path}")


def _label(step: Step) -> str:
    return "\n".join([*_parts(step), step.fingerprint, *([step.file_str] if step.recorded else [])])


def to_dot(view: LineageView) -> str:
    """Graphviz: `cachetool lineage FP --all --format dot | dot -Tsvg > lineage.svg`."""
    lines = ["digraph lineage {", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
    for _, s in view.steps:
        attrs = [f"label={json.dumps(_label(s))}"]
        if s.fingerprint == view.fingerprint:
            attrs.append("penwidth=2")
        if not s.recorded:
            attrs.append("style=dashed")
        lines.append(f"  {json.dumps(s.fingerprint)} [{', '.join(attrs)}];")
    for p, c in view.edges:
        lines.append(f"  {json.dumps(p)} -> {json.dumps(c)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_text(text: str) -> str:
    # Labels are HTML: `<lambda>` would be a tag (and vanish) without its entity codes.
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;").replace("\n", "<br/>")


def to_mermaid(view: LineageView) -> str:
    """A Mermaid flowchart (renders on GitHub in a ```mermaid block)."""
    ids = {s.fingerprint: f"n{i}" for i, (_, s) in enumerate(view.steps)}
    lines = ["flowchart TD"]
    for _, s in view.steps:
        lines.append(f'  {ids[s.fingerprint]}["{_mermaid_text(_label(s))}"]')
    for p, c in view.edges:
        if p in ids and c in ids:
            lines.append(f"  {ids[p]} --> {ids[c]}")
    return "\n".join(lines) + "\n"
