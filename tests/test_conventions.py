"""Conventions every command shares with `hf cache`: one JSON envelope, `accessed` for `used`,
durations with units, pins that can be listed and seen, output that fits 80 columns."""

from __future__ import annotations

import json
import os
import pty
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cachetool.cli.app import app
from cachetool.formatting import fit_paths, short_path, wrap_line

runner = CliRunner()
HASH = "7067e4b2422ab4b7d61ccf25eb67c03d0df17a5264a8fa53f4593051b5adb555"


def invoke(*args: str, columns: int = 120, **env: str | None) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": str(columns), **env}, catch_exceptions=False)


# -- paths for people ----------------------------------------------------------------------


def test_short_path_keeps_names_whole_and_uses_tilde(monkeypatch: pytest.MonkeyPatch) -> None:
    """Long paths lose folders from the middle, never part of a name (a hash stays whole), and
    the home folder reads `~`."""
    monkeypatch.setenv("HOME", "/home/ana")
    path = f"/home/ana/.cache/huggingface/datasets/csv/default-7e98570819c37f81/0.0.0/{HASH}/cache-x.arrow"
    assert (
        short_path(path, None)
        == f"~/.cache/huggingface/datasets/csv/default-7e98570819c37f81/0.0.0/{HASH}/cache-x.arrow"
    )
    assert short_path(path, 100) == f"~/.cache/…/0.0.0/{HASH}/cache-x.arrow"
    assert short_path(path, 60) == "~/.cache/huggingface/datasets/csv/…/cache-x.arrow"
    assert short_path(path, 10) == "…/cache-x.arrow"
    assert short_path("/home/anabel/x", 5) == "/home/anabel/x"[:0] + "…/x"  # not the home folder
    assert short_path("/data/a", 3) == "/data/a"  # nothing to leave out


def test_wrap_line_breaks_only_at_spaces() -> None:
    line = f"  culprit in /srv/projects/pipeline/{HASH}/steps.py:12 differs between runs"
    pieces = wrap_line(line, 40)
    assert pieces == [
        "  culprit in",
        f"    /srv/projects/pipeline/{HASH}/steps.py:12",
        "    differs between runs",
    ]


def test_fit_paths_shortens_the_path_in_a_message_not_the_words() -> None:
    message = "cache directory not found: /srv/a/b/c/d/e/f/g/h/i/j/k/l/m/n/datasets."
    assert fit_paths(message, 50) == "cache directory not found: /srv/…/l/m/n/datasets."
    assert fit_paths(message, 200) == message


def test_dirs_fits_80_columns_exactly(tmp_path: Path) -> None:
    """`cachetool dirs` at 80 columns: one line per location, paths under the home folder as
    `~`, a long path shortened from the middle with every name whole."""
    home = tmp_path / "home"
    cache = home / "projects" / "a-rather-long-project-name" / "data" / "huggingface-cache" / "datasets"
    env = {
        "HOME": str(home),
        "HF_DATASETS_CACHE": str(cache),
        "HF_HOME": None,
        "XDG_CACHE_HOME": None,
        "XDG_STATE_HOME": None,
        "HF_HUB_CACHE": None,
        "CACHETOOL_HOME": None,
        "TMPDIR": "/tmp",
    }
    result = invoke("dirs", columns=80, **env)
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert lines[0].split() == ["location", "path", "from"]
    rows = dict((line[:20].strip(), line[20:]) for line in lines[1:13] if line[:20].strip())
    assert rows["datasets cache"].split()[0] == "~/…/huggingface-cache/datasets"
    assert rows["downloads"].split()[0] == "~/projects/…/datasets/downloads"
    assert rows["modules"].split()[0] == "~/.cache/huggingface/modules"
    assert rows["temp dir"].split() == ["/tmp", "TMPDIR"]


# -- durations -----------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--older-than", "--min-age"])
def test_a_duration_without_a_unit_is_refused_with_a_hint(tmp_path: Path, option: str) -> None:
    """`gc --older-than 30` could mean 30 days or 30 seconds: it is a usage error asking which,
    and nothing is removed. `--min-age 0` needs no unit."""
    (tmp_path / "tmpabcdefgh").write_bytes(b"x")
    result = invoke("gc", "--cache-dir", str(tmp_path), "--temp", option, "30", "-y")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"Error: invalid {option} '30': '30' needs a unit: 30d (days)? 30h (hours)? 30s (seconds)? "
        "(units: s, m, h, d, w, mo, y)"
    )
    assert (tmp_path / "tmpabcdefgh").exists()
    ok = invoke("gc", "--cache-dir", str(tmp_path), "--temp", "--min-age", "0", "--dry-run", "--json")
    assert ok.exit_code == 0, ok.output


def test_an_error_line_fits_the_terminal(tmp_path: Path) -> None:
    """On an 80-column terminal an error stays one line that fits: the path in it is shortened
    from the middle, its last name whole."""
    missing = tmp_path.joinpath(*[f"folder-{i}" for i in range(12)], "datasets")
    master, slave = pty.openpty()
    import fcntl
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "CACHETOOL_DEBUG")}
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", "ls", "--cache-dir", str(missing)],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
        timeout=60,
    )
    os.close(slave)
    err = os.read(master, 65536).decode()
    os.close(master)
    assert proc.returncode == 2
    import re

    plain = re.sub(r"\x1b\[[0-9;]*m", "", err).strip()
    assert len(plain.splitlines()) == 1 and len(plain) <= 80, plain
    assert plain.startswith("Error: cache directory not found: ") and plain.endswith("/folder-11/datasets")
    assert "…" in plain


# -- on a real cache -----------------------------------------------------------------------


@pytest.mark.slow
class TestOnRealCache:
    def test_accessed_is_used(self, real_cache: dict[str, Any]) -> None:
        """`accessed` (the `hf cache` key) filters and sorts exactly as `used`."""
        cache = real_cache["cache"]
        for a, b in (("accessed>0s", "used>0s"), ("accessed<100y", "used<100y")):
            assert invoke("ls", cache, "-q", "-f", a).stdout == invoke("ls", cache, "-q", "-f", b).stdout
        by_used = invoke("ls", cache, "-q", "--sort", "used:asc").stdout
        assert invoke("ls", cache, "-q", "--sort", "accessed:asc").stdout == by_used and by_used

    def test_pins_are_listed_marked_and_filtered(self, real_cache: dict[str, Any]) -> None:
        """`pin --list` (human, --json, -q) lists the pins; `ls` and `show` mark pinned entries;
        `ls --filter pinned=yes` keeps only them."""
        cache, fp = real_cache["cache"], real_cache["csv_source"]
        assert invoke("pin", "--list", "--cache-dir", cache).stdout.startswith("No pins in ")
        assert invoke("pin", fp, "--cache-dir", cache).exit_code == 0
        try:
            assert invoke("pin", "--list", "-q", "--cache-dir", cache).stdout == f"{fp}\n"
            doc = json.loads(invoke("pin", "--list", "--json", "--cache-dir", cache).stdout)
            assert list(doc) == ["version", "root", "pins"]
            (pin,) = doc["pins"]
            assert (pin["fingerprint"], pin["kind"], pin["path"]) == (fp, "source", pin["path"])
            assert pin["size"] > 0 and pin["time"].endswith("+00:00")
            human = invoke("pin", "--list", "--cache-dir", cache).stdout
            assert fp in human and "source" in human
            assert invoke("ls", cache, "-q", "--filter", "pinned=yes").stdout == f"{fp}\n"
            assert fp not in invoke("ls", cache, "-q", "--filter", "pinned=no").stdout
            listing = json.loads(invoke("ls", cache, "--json").stdout)["entries"]
            assert [e["fingerprint"] for e in listing if e["pinned"]] == [fp]
            table = invoke("ls", cache).stdout
            row = next(line for line in table.splitlines() if fp in line)
            assert " yes " in row and "pin" in table
            shown = invoke("show", fp, "--cache-dir", cache).stdout
            assert "pinned" in shown and "gc never evicts it" in shown
            assert json.loads(invoke("show", fp, "--cache-dir", cache, "--json").stdout)["pinned"] is True
        finally:
            invoke("unpin", fp, "--cache-dir", cache)
        assert invoke("ls", cache, "-q", "--filter", "pinned=yes").stdout == ""

    def test_every_json_document_starts_with_version(self, real_cache: dict[str, Any]) -> None:
        """One envelope: `version` first, then the command's fields, in every command."""
        cache, fp = real_cache["cache"], real_cache["csv_source"]
        commands = [
            ["ls", cache],
            ["show", fp, "--cache-dir", cache],
            ["lineage", fp, "--cache-dir", cache],
            ["verify", fp, "--cache-dir", cache],
            ["stats", "--cache-dir", cache],
            ["dirs", "--cache-dir", cache],
            ["pin", "--list", "--cache-dir", cache],
            ["gc", "--temp", "--dry-run", "--cache-dir", cache],
        ]
        for args in commands:
            for flag in (["--json"], ["--format", "json"]):
                result = invoke(*args, *flag)
                doc = json.loads(result.stdout)
                assert next(iter(doc)) == "version" and doc["version"] == 1, args

    def test_show_and_ls_fit_80_columns_with_names_whole(self, real_cache: dict[str, Any]) -> None:
        """At 80 columns `show`'s file table and `ls` never split a file name or a fingerprint."""
        cache, fp = real_cache["cache"], real_cache["shards"]
        shown = invoke("show", fp, "--cache-dir", cache, columns=80).stdout
        names = [f"cache-{fp}_0000{i}_of_00002.arrow" for i in range(2)]
        for name in names:
            assert any(line.split()[:1] == [name] for line in shown.splitlines()), (name, shown)
        assert max(len(line.rstrip()) for line in shown.splitlines()) <= 80
        listing = invoke("ls", cache, columns=80).stdout
        assert fp in listing


@pytest.mark.slow
def test_run_shows_the_script_in_ps(tmp_path: Path) -> None:
    """`ps` shows a pipeline started with `cachetool run` by its script and arguments (as
    `python prepare.py --rows 10` would), not as `python -c import sys; …`."""
    from tests.conftest import hf_env

    (tmp_path / "prepare.py").write_text(
        "import os, subprocess\n"
        "ps = ['ps', '-o', 'args=', '-p', str(os.getpid())]\n"
        "print(subprocess.run(ps, capture_output=True, text=True).stdout.strip())\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", "run", "prepare.py", "--rows", "10"],
        cwd=tmp_path,
        env=hf_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout.strip()
    assert shown.endswith(" prepare.py --rows 10"), shown
    assert " -c " not in shown and "import" not in shown, shown
