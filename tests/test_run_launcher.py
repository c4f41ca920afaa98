"""`cachetool run`'s launcher: the interpreter it starts has the options of the one it replaces."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Prints what `cachetool run` would give the script's interpreter, and what the standard library
#: gives a child interpreter, for the options this interpreter was started with.
PROBE = (
    "import json, subprocess; from cachetool.trace.runner import interpreter_flags; "
    "print(json.dumps([interpreter_flags(), subprocess._args_from_interpreter_flags()]))"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        [],
        ["-O"],
        ["-OO", "-b"],
        ["-bb", "-s"],
        ["-B", "-E", "-q"],
        ["-X", "utf8", "-W", "ignore", "-W", "error::DeprecationWarning"],
        ["-X", "dev", "-X", "importtime=2", "-X", "faulthandler", "-v"],
        ["-d", "-X", "frozen_modules=off"],
    ],
)
def test_the_script_gets_the_interpreter_options_of_the_command(options: list[str]) -> None:
    """`python -O -m cachetool run script.py` runs the script with `-O` (and so on for every option
    the standard library passes on to a child interpreter): the launcher computes them without
    importing `subprocess`, and gives the same list."""
    proc = subprocess.run(
        [sys.executable, *options, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    ours, stdlib = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ours == stdlib
