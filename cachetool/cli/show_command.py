"""`cachetool show`'s Typer options and help; the work is `cachetool.cli.show.run_show`."""

from __future__ import annotations

from typing import Annotated

import typer

from cachetool.cli.common import (
    CacheDirOption,
    FormatOption,
    JsonOption,
    NoTruncateOption,
    QuietOption,
    handle_errors,
)
from cachetool.cli.output import OutputFormat, choose_format
from cachetool.cli.show import run_show


def show_command(
    fingerprint: Annotated[
        str, typer.Argument(help="A fingerprint, a unique prefix of one, an alias, or a path.")
    ],
    cache_dir: CacheDirOption = None,
    fmt: FormatOption = OutputFormat.human,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    no_truncate: NoTruncateOption = False,
) -> None:
    """Show everything known about one cache entry.

    Files with sizes and paths, content (data or indices), schema and `features`, row count, the
    fingerprint recorded inside each file and whether it matches the name, completeness (the
    end-of-stream marker), timestamps, expected rows for source splits, and the recorded lineage
    when the pipeline ran under `cachetool run`. A unique prefix of a fingerprint is enough.

    **Examples**

        cachetool show 7a5731241fa9ef8b

        cachetool show 7a57 --json

        cachetool show 7a57 --cache-dir /data/hf-cache

    Exit codes: 0 shown; 2 unknown or ambiguous fingerprint (candidates listed), or missing cache.
    """
    handle_errors(run_show)(fingerprint, cache_dir, choose_format(fmt, as_json, quiet), no_truncate)
