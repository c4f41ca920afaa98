"""The command line: the launcher (`entry`), the plain reader of `ls` and `--version` (`light`),
the Typer app (`app`) and one module per command, each rendering what the layers below return.

May import every other package of cachetool (it is the top layer); nothing imports it. What the
launcher, the app and the plain reader share lives here: whether the shell asks for completions
and what a closed standard output means.
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
