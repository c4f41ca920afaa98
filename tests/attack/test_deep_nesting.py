"""A folder nested deeper than any `datasets` cache is (1,100 levels, a path of 2,200 characters;
2,100 levels, a path longer than the system opens) never crashes `ls`, `verify` or `gc`: the
walk keeps its folders on a list, not on Python's stack, and what it cannot open is a warning."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import forks
from tests.attack.races import synthesize_cache
from tests.conftest import hf_env

pytestmark = pytest.mark.slow


def _nest(root: Path, levels: int) -> None:
    """`root/d/d/…/d` (`levels` deep) with a temp-looking file at the bottom, made through
    descriptors (the path is longer than a path the system takes)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(os.open("tmpabcdefgh", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    os.close(fd)


def _unnest(root: Path, levels: int) -> None:
    """Remove what `_nest` made, bottom up (pytest's clean-up recurses)."""
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    for _ in range(levels):
        fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
    for name in os.listdir(fds[-1]):
        os.unlink(name, dir_fd=fds[-1])
    for i in range(levels, 0, -1):
        os.close(fds[i])
        os.rmdir("d", dir_fd=fds[i - 1])
    os.close(fds[0])


@pytest.mark.parametrize("levels", [1100, 2100])
def test_a_folder_nested_deeper_than_any_cache(tmp_path: Path, levels: int) -> None:
    """`ls`, `verify` and `gc --temp` end normally (no RecursionError) and still list the
    cache's entries; past the system's longest path, the folder is named in a warning."""
    root = tmp_path / "cache"
    synthesize_cache(root, 2)
    _nest(root, levels)
    env = hf_env(tmp_path)
    at = ["--cache-dir", str(root)]
    try:
        for args in (
            ["ls", str(root), "--json"],
            ["verify", *at],
            ["gc", "--temp", "--min-age", "0", "-y", *at],
        ):
            proc = forks.run(
                [sys.executable, "-m", "cachetool", *args], env=env, capture_output=True, text=True
            )
            assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), (args, proc.stderr[-1500:])
            if args[0] == "ls":
                assert proc.stdout.count('"kind": "derived"') == 2
                assert ("File name too long" in proc.stderr) == (levels > 2000)
    finally:
        _unnest(root, levels)
