"""`cachetool explain`'s Typer options and help; the work is `cachetool.cli.explain.run_explain`."""

from __future__ import annotations

from pathlib import Path
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
from cachetool.cli.explain import run_explain
from cachetool.cli.output import OutputFormat, choose_format


# Long only by its Typer options and its --help text (the docstring): the work is one call.
def explain_command(
    fingerprint: Annotated[
        str | None,
        typer.Argument(
            help="A recorded fingerprint (a unique prefix is enough) or a cache-<fp>.arrow path.",
            show_default=False,
        ),
    ] = None,
    last: Annotated[
        bool, typer.Option("--last", help="Explain every step the most recent recorded run computed.")
    ] = False,
    script: Annotated[
        Path | None,
        typer.Option(
            "--script", help="Like --last, for the most recent run of this script.", show_default=False
        ),
    ] = None,
    history: Annotated[
        int, typer.Option("--history", min=0, help="With a fingerprint: also compare this many earlier runs.")
    ] = 3,
    cache_dir: CacheDirOption = None,
    fmt: Annotated[OutputFormat, format_option(quiet="the explained steps' fingerprints, one a line")] = (
        OutputFormat.human
    ),
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    all_roots: AllRootsOption = False,
) -> None:
    """Say why a step was recomputed, and warn when a cache hit reused a result of older code.

    A recorded step is compared with its siblings: earlier records of the same call site (or
    function) with another fingerprint, most recent first. The answer names what changed: an
    argument (`fn_kwargs['threshold']` changed 0.5 → 0.6), the function's source (with the line),
    an object that pickles differently in every process (then run `cachetool check-determinism`),
    the source dataset (an input file modified), a random fingerprint (an argument `datasets`
    cannot hash), or only an argument that does not change the result (`writer_batch_size`). A
    change upstream is named with the step where it happened. "first run recorded in this
    cache" when the cache held nothing before this run (runs recorded in other caches do not
    count: explain and lineage read the ledger of this cache, plus the roots its inputs come
    from), "first time this step ran" when there is nothing else to compare with.

    **Stale hits.** A function imported from your own module is hashed by name, so editing it
    keeps the fingerprint and `datasets` reuses the old result. explain reports "cache entry
    cache-….arrow was reused at 10:31, but `clean_text` in text_helpers.py changed since it was
    computed", with the line, and every entry made from it as stale too; the hint removes them
    all in one `cachetool gc` command.

    Needs pipelines run under `cachetool run` (or `cachetool.tracing()`).

    **Examples**

        cachetool explain --last

        cachetool explain 7a5731241fa9ef8b

        cachetool explain 7a57 --history 10

        cachetool explain --script train.py --json

    Exit codes: 0 explained; 1 a stale cache hit was found; 2 usage (no fingerprint and no
    --last/--script, unknown or ambiguous fingerprint, nothing recorded, missing cache).
    """
    code = handle_errors(run_explain)(
        fingerprint, last, script, history, cache_dir, choose_format(fmt, as_json, quiet), all_roots
    )
    if code:
        raise typer.Exit(code)
