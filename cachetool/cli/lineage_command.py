"""`cachetool lineage`'s Typer options and help; the work is `cachetool.cli.lineage.run_lineage`."""

from __future__ import annotations

from typing import Annotated

import typer

from cachetool.cli.common import (
    AllRootsOption,
    CacheDirOption,
    JsonOption,
    QuietOption,
    format_option,
    handle_errors,
)
from cachetool.cli.lineage import run_lineage
from cachetool.cli.output import OutputFormat, choose_format


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
    handle_errors(run_lineage)(
        fingerprint,
        cache_dir,
        choose_format(fmt, as_json, quiet),
        descendants=descendants,
        all=all_,
        internal=internal,
        all_roots=all_roots,
    )
