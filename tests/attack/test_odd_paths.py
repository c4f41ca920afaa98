"""Paths longer than PATH_MAX, absurd periods and folders swapped under a running command: each
command ends with one `Error:` line or a finding, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cachetool.cli.app import app
from tests.attack.races import synthesize_cache
from tests.attack.test_gc_swaps import SWAPPER
from tests.conftest import hf_env

pytestmark = pytest.mark.slow

COMMANDS = [
    ["ls", "{root}"],
    ["show", "0000000000000000", "--cache-dir", "{root}"],
    ["verify", "--cache-dir", "{root}"],
    ["gc", "--temp", "--min-age", "0", "-y", "--cache-dir", "{root}"],
    ["stats", "--cache-dir", "{root}"],
    ["lineage", "0000000000000000", "--cache-dir", "{root}"],
    ["pin", "0000000000000000", "--cache-dir", "{root}"],
    ["explain", "--last", "--cache-dir", "{root}"],
]


class _Done:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _run(cmd: list[str], root: Path, env: dict[str, str]) -> _Done:
    """The command in this process (fast; an exception escaping it fails the test as a
    traceback would), with the test's environment."""
    args = [a.format(root=os.fsdecode(root)) for a in cmd]
    result = CliRunner().invoke(app, args, env=env, catch_exceptions=True)
    err = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err += "\nTraceback: " + repr(result.exception)
    return _Done(result.exit_code, result.stdout, err)


def _deep_tree(base: Path, depth_bytes: int) -> Path:
    """A real folder whose absolute path is longer than `depth_bytes` (made one step at a time
    from descriptors: no path that long can be passed to mkdir)."""
    name = "d" * 200
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    path = base
    try:
        while len(os.fsencode(path)) <= depth_bytes:
            os.mkdir(name, dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
            path = path / name
        with open(os.open("cache-00000000000000ff.arrow", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "wb") as f:
            f.write(b"not arrow")
    finally:
        os.close(fd)
    return path


def test_paths_longer_than_path_max(tmp_path: Path) -> None:
    """A cache root given with a path longer than PATH_MAX (missing, and real), and a real cache
    holding a folder deeper than PATH_MAX: every command ends with `Error:` or its findings."""
    env = hf_env(tmp_path)
    root = tmp_path / "cache"
    synthesize_cache(root, 2)
    deep = _deep_tree(root / "csv", 4200)
    missing = tmp_path.joinpath(*["m" * 200] * 25)
    for where, target in (
        ("missing long root", missing),
        ("real long root", deep),
        ("deep tree inside", root),
    ):
        for cmd in COMMANDS:
            proc = _run(cmd, target, env)
            assert "Traceback" not in proc.stderr, (where, cmd, proc.stderr[-1500:])
            assert proc.returncode in (0, 1, 2), (where, cmd, proc.returncode, proc.stderr[-500:])
            if proc.returncode == 2:
                lines = proc.stderr.strip().splitlines()
                assert lines and lines[-1].startswith("Error: "), (where, cmd, proc.stderr)
    listing = json.loads(_run(["ls", "{root}", "--json"], root, env).stdout)
    assert len([e for e in listing["entries"] if e["kind"] == "derived"]) == 2


def test_stats_since_longer_than_the_clock_means_everything(tmp_path: Path) -> None:
    """`stats --since 9999999999y` (and 10^23 years) reaches back before 1970: every recorded run,
    exit 0, no traceback."""
    env = hf_env(tmp_path)
    root = tmp_path / "cache"
    synthesize_cache(root, 1)
    for since in ("9999999999y", "99999999999999999999999y"):
        proc = _run(["stats", "--since", since, "--cache-dir", "{root}"], root, env)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-1500:]


def test_commands_while_an_ancestor_of_the_root_is_swapped(tmp_path: Path) -> None:
    """While a real process swaps an ancestor of the root with a symlink to a decoy tree
    (`renameat2(RENAME_EXCHANGE)`, as fast as it can), each command run twice ends with its
    output or one `Error:` line (EINVAL, ENOENT, ELOOP on the way), never a traceback."""
    base = tmp_path
    root = base / "a" / "b" / "cache"
    synthesize_cache(root, 20)
    synthesize_cache(base / "decoy" / "b" / "cache", 20)
    (base / "a-link").symlink_to(base / "decoy")
    stop = base / "stop"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(base / "a"), str(base / "a-link"), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    env = hf_env(tmp_path)
    try:
        assert swapper.stdout is not None and swapper.stdout.readline().strip() == "swapping"
        for _ in range(2):
            for cmd in COMMANDS:
                proc = _run(cmd, root, env)
                assert "Traceback" not in proc.stderr, (cmd, proc.stderr[-1500:])
                assert proc.returncode in (0, 1, 2), (cmd, proc.returncode, proc.stderr[-500:])
    finally:
        stop.touch()
        swapper.wait(timeout=30)
