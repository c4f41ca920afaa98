"""The command line: the launcher (`entry`: `run SCRIPT` before anything heavy, the rest to the
Typer app), the Typer app (`app`), what every command shares (`common`: the declaration of its
options, the error boundary), the output sink (`output`), and one module per command, whose
function `common.command` declares.

The top layer: may import every other package of cachetool; nothing imports it. Start-up stays
cheap because each command imports its model modules inside the command, and Rich only where a
table is drawn: `entry`, `common` and `output` import no Typer, Click or Rich at import.
"""

from __future__ import annotations

import os


def completing() -> bool:
    """Whether the shell asks for completions (a TAB): the Typer app answers those."""
    return "_CACHETOOL_COMPLETE" in os.environ
