"""The command line: the launcher (`entry`), the light path of plain `ls`/`show`/`lineage`/
`explain` and `--version` (`light`), the Typer app (`app`), what every command shares (`common`:
the declaration of its options, the error boundary), the output sink (`output`), and one module
per command, whose function `common.command` declares.

The top layer: may import every other package of cachetool; nothing imports it. `entry`,
`light`, `common` and `output` import no Typer, Click or pydantic.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def completing() -> bool:
    """Whether the shell asks for completions (a TAB): the Typer app answers those."""
    return "_CACHETOOL_COMPLETE" in os.environ


def closed_stdout(argv: Sequence[str]) -> int | None:
    """The exit code of a command started with its standard output closed (`cachetool ls >&-`):
    one `Error:` line instead of a traceback at the first line written, and nothing done.
    None when stdout is open, for `run` (the script's stdout is the script's) and at a TAB. A
    closed stderr becomes /dev/null: messages are lost, exit codes are not, and no file the
    command opens takes its place."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    if sys.stdout is not None or argv[:1] == ["run"] or completing():
        return None
    from cachetool.cli.output import error
    from cachetool.errors import ExitCode

    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (what the error line flushes first)
    error("standard output is closed (to discard the output: >/dev/null)")
    return int(ExitCode.USAGE)
