"""The `cachetool` console script and `python -m cachetool`: `run` goes straight to the script,
plain `ls` and `--version` are answered by `cachetool.cli.light`, the rest by the Typer app.

`cachetool run SCRIPT ARGS...` becomes the script (`python script.py ARGS...` with tracing on), so
building the Typer app first (Typer, Click, Rich, pydantic: ~0.2 s) bought nothing but start-up
time. A `run` whose script python would run (and `run -m MODULE`) is handed to `run_here` here,
before anything heavy is imported (the script runs in this interpreter, which holds nothing but
the bootstrap's few modules); every other command line (`run --help`, `run` without a script, a
script that does not exist or a folder without `__main__.py`, `--version`, shell completion) goes
to the Typer app in `cachetool.cli.app`, which answers it exactly as it always has.
`cachetool.cli.light` answers what its strict grammar reads whole (`ls` with its options,
`--version`) with the functions the Typer commands call, without Typer, Click or pydantic;
anything else it leaves to the Typer app.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cachetool.cli import closed_stdout, completing


def main() -> None:
    """Console-script entry point."""
    argv = sys.argv[1:]
    if _module_run(argv):
        from cachetool.trace.runner import run_here

        run_here(argv[2], argv[3:], module=True)  # does not return
    if _plain_run(argv):
        from cachetool.errors import CachetoolError
        from cachetool.trace.runner import check_script, run_here

        try:
            check_script(argv[1])
        except CachetoolError:
            pass  # the Typer app reports it
        else:
            run_here(argv[1], argv[2:])  # does not return
    code = closed_stdout(argv)
    if code is None:
        from cachetool.cli.light import answer

        code = answer(argv)
    if code is not None:
        sys.exit(code)
    from cachetool.cli.app import main as app_main

    app_main()


def _plain_run(argv: Sequence[str]) -> bool:
    """`run SCRIPT ...` as the Typer app reads it: `run` first (the app's own options all end it
    or come before it), then a script that is not an option of `run` (`--help`, `--`): after the
    script, everything is the script's, `--help` included."""
    return (
        len(argv) >= 2
        and argv[0] == "run"
        and not argv[1].startswith("-")
        and not completing()  # the app completes
    )


def _module_run(argv: Sequence[str]) -> bool:
    """`run -m MODULE ...` (or `--module`): everything after the module is the module's, as with
    `python -m`."""
    return len(argv) >= 3 and argv[0] == "run" and argv[1] in ("-m", "--module") and not completing()
