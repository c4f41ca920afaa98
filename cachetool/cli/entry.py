"""The `cachetool` console script and `python -m cachetool`: `run SCRIPT` goes straight to the
script before Typer is imported (a traced run of cache hits costs what the script costs, #27);
every other command line goes to the Typer app (`cachetool.cli.app`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cachetool.cli import completing


def main() -> None:
    """Console-script entry point."""
    argv = sys.argv[1:]
    if len(argv) >= 2 and argv[0] == "run" and not completing():
        _run(argv[1:])  # returns only what the Typer app answers
    from cachetool.cli.app import main as app_main

    app_main()


def _run(args: Sequence[str]) -> None:
    """`run -m MODULE ...` and `run SCRIPT ...` as the Typer app reads them (its own options all
    come before `run`): after the module or the script, everything is theirs, `--help` included.
    Returns for an option of `run` and a script that does not exist: the Typer app answers."""
    import os

    from cachetool.errors import CachetoolError
    from cachetool.trace.runner import check_script, run_here

    while len(args) >= 2 and args[0] in ("--reuse-equivalent", "--once", "--remote"):
        if args[0] in ("--reuse-equivalent", "--once"):
            from cachetool.trace.install import ONCE_ENV, REUSE_ENV

            os.environ[REUSE_ENV if args[0] == "--reuse-equivalent" else ONCE_ENV] = "1"
            args = args[1:]
            continue
        from cachetool.remote.client import is_remote_url  # (the remote package: only for --remote)

        if len(args) >= 3 and is_remote_url(args[1]):  # else the app says it is no URL
            os.environ["CACHETOOL_REMOTE"] = args[1]
            args = args[2:]
        else:
            return
    if args[0] in ("-m", "--module") and len(args) >= 2:
        run_here(args[1], args[2:], module=True)  # does not return
    if args[0].startswith("-"):
        return
    try:
        check_script(args[0])
    except CachetoolError:
        return
    run_here(args[0], args[1:])  # does not return
