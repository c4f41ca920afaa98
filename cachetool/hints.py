"""Hints that are commands: each one does what it says when pasted into a shell.

A hint names exactly what the finding is about (a fingerprint or a path) and carries every option
the command needs to act on it: the cache root (`--cache-dir`, so it works from any shell), and
`--min-age 0`, because the default one-hour minimum age would keep a file that was just found
dead or stale. Naming one entry is the user's decision about that entry; gc still refuses what a
live process holds, maps or is writing, so the hint never removes a file in use.
"""

from __future__ import annotations

import os
import shlex


def shell_command(*args: str) -> str:
    """`cachetool <args>`, quoted for a POSIX shell."""
    return shlex.join(["cachetool", *args])


def gc_command(root: str | os.PathLike[str], *targets: str) -> str:
    """`cachetool gc <targets> --min-age 0 --cache-dir <root>`, quoted for a POSIX shell."""
    return shell_command("gc", *targets, "--min-age", "0", "--cache-dir", os.fsdecode(root))
