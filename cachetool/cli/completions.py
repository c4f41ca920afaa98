"""Write the shell completion scripts in `completions/` (bash, zsh, fish).

The scripts ask `cachetool` itself for candidates at TAB time (Click's completion protocol), so
command and option names always come from the installed app. Regenerate with
`python -m cachetool.cli.completions completions/`; a test fails when the files are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

SHELLS = {"bash": "cachetool.bash", "zsh": "_cachetool", "fish": "cachetool.fish"}


def completion_script(shell: str) -> str:
    from typer.completion import get_completion_script

    return (
        get_completion_script(prog_name="cachetool", complete_var="_CACHETOOL_COMPLETE", shell=shell) + "\n"
    )


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "completions")
    folder.mkdir(parents=True, exist_ok=True)
    for shell, name in SHELLS.items():
        (folder / name).write_text(completion_script(shell), encoding="utf-8")
        print(folder / name)
