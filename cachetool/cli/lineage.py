"""`cachetool lineage`: where a fingerprint comes from, and what was made from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cachetool.cli.common import (
    AllRootsOption,
    CacheDirOption,
    JsonOption,
    Output,
    OutputFormat,
    QuietOption,
    choose_format,
    format_option,
    handle_errors,
    hint,
    warn,
)

if TYPE_CHECKING:
    from cachetool.lineage.query import LineageView
    from cachetool.lineage.step import Step

NOT_RECORDED = "parent not recorded — run the pipeline with `cachetool run`"


def lineage_command(
    fingerprint: Annotated[str, typer.Argument(help="A fingerprint or a unique prefix of one.")],
    descendants: Annotated[
        bool, typer.Option("--descendants", "-d", help="Show the tree of what was made from it.")
    ] = False,
    all_: Annotated[
        bool, typer.Option("--all", "-a", help="Show the whole forest of its dataset (every branch).")
    ] = False,
    internal: Annotated[
        bool, typer.Option("--internal", help="Include calls datasets makes itself (set_format, shards).")
    ] = False,
    cache_dir: CacheDirOption = None,
    all_roots: AllRootsOption = False,
    fmt: Annotated[
        OutputFormat, format_option("dot", "mermaid", quiet="the steps' fingerprints, one a line")
    ] = OutputFormat.human,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
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
    _lineage(
        fingerprint,
        cache_dir,
        choose_format(fmt, as_json, quiet),
        descendants=descendants,
        all=all_,
        internal=internal,
        all_roots=all_roots,
    )


@handle_errors
def _lineage(fingerprint: str, cache_dir: Path | None, fmt: OutputFormat, **options: bool) -> None:
    from cachetool.cache.dirs import existing_root
    from cachetool.lineage.query import lineage

    view = lineage(existing_root(cache_dir), fingerprint, **options)
    if fmt == OutputFormat.json:
        Output(fmt).json(view.to_json())
    elif fmt == OutputFormat.quiet:
        Output(fmt).ids(s.fingerprint for _, s in view.steps)
    elif fmt == OutputFormat.dot:
        sys.stdout.write(to_dot(view))
    elif fmt == OutputFormat.mermaid:
        sys.stdout.write(to_mermaid(view))
    else:
        render(Output(OutputFormat.human), view)
    for w in view.warnings:
        warn(w)
    if not view.recorded:
        hint("lineage is recorded while a pipeline runs: `cachetool run pipeline.py`")


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
    notes = []
    if step.fingerprint_given:
        notes.append("new_fingerprint= given")
    if step.random_fallback:
        rf = step.random_fallback
        arg = rf.argument or "the transform"
        notes.append(f"random fingerprint: {arg} could not be hashed ({rf.error})")
    if step.internal:
        notes.append("made inside another step by datasets")
    if step.foreign and step.root:
        notes.append(f"recorded in {step.root}")
    for path in step.saved_to:
        notes.append(f"saved to {path}")
    if step.deleted:
        notes.append(step.deleted)
    if step.where:
        notes.append(step.where)
    return "; ".join(notes)


def step_line(step: Step) -> str:
    """`map  upper @ pipeline.py:21  batched=True  ->  5f0c…  1.5 kB  (1 miss, 2 hits)`."""
    if not step.recorded:
        return f"{step.fingerprint}  {NOT_RECORDED}"
    parts = [_what(step)]
    if step.function_str:
        parts.append(step.function_str)
    if step.args_str:
        parts.append(step.args_str)
    tail = f"{step.fingerprint}  {step.file_str}"
    runs = _runs(step)
    if runs:
        tail += f"  ({runs})"
    notes = _notes(step)
    if notes:
        tail += f"  [{notes}]"
    return "  ".join(parts) + "  ->  " + tail


def render(out: Output, view: LineageView) -> None:
    title = {"chain": "Lineage of", "descendants": "Descendants of", "all": "Lineage forest of"}[view.mode]
    out.line(f"{title} {view.fingerprint}", style="bold")
    for number, (depth, s) in enumerate(view.steps, 1):
        prefix = f"{number:>3}. " if view.mode == "chain" else "  " * (depth + 1) + ("└ " if depth else "")
        mark = "* " if s.fingerprint == view.fingerprint and view.mode == "all" else ""
        out.line(prefix + mark + step_line(s), style="bold" if mark else None)
    if not view.recorded:
        e = view.entry
        if e is not None:
            out.line("")
            if e.kind.value == "source":
                # A prepared split starts every chain: nothing comes before it, recorded or not.
                out.line(f"{view.fingerprint}: a source split, the start of its chains (no run recorded)")
            else:
                out.line(f"{view.fingerprint}: {NOT_RECORDED}")
            facts = [f"kind {e.kind_str}"]
            if e.dataset:
                facts.append(f"dataset {e.dataset}")
            if e.split:
                facts.append(f"split {e.split}")
            if e.content:
                facts.append(f"content {e.content}")
            facts.append(f"size {e.size_str}")
            out.line("On disk: " + ", ".join(facts))
            out.line(f"Path: {e.path}")


def _label(step: Step) -> str:
    parts = [_what(step)]
    if step.function_str:
        parts.append(step.function_str)
    if step.args_str:
        parts.append(step.args_str)
    parts.append(step.fingerprint)
    if step.recorded:
        parts.append(step.file_str)
    return "\n".join(parts)


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
    return text.replace('"', "#quot;").replace("\n", "<br/>")


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
