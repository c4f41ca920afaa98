"""gc removes only what matches the `datasets` layout for its kind: a user's files that happen
to carry leftover-looking names stay, and a folder that is not a datasets cache is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forks
from tests.attack.races import synthesize_cache
from tests.conftest import hf_env

pytestmark = pytest.mark.slow

OLD = 3 * 3600


def _user_tree(home: Path) -> list[Path]:
    """A home-like tree whose files look like datasets leftovers by name, but are not."""
    files = {
        "thesis.tex": b"\\documentclass{article}",
        "refs.bib": b"@book{x}",
        ".config/someapp/state.json": b'{"window": [1, 2]}',
        ".config/someapp/settings.ini": b"[a]\nb=1\n",
        "Documents/data-00000-of-00001.arrow": b"",
        "Documents/notes.txt": b"remember",
        "Downloads/notes.lock": b"",
        "projects/x/model.arrow": b"ARROW1\x00\x00user file",
        "projects/x/tmpabcdefgh": b"my scratch notes",
        "projects/x/tmp12345678": b"",
        "old/run.incomplete/out.txt": b"partial",
    }
    made = []
    for rel, data in files.items():
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (os.path.getmtime(p) - OLD,) * 2)
        made.append(p)
    return made


def _gc(env: dict[str, str], root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return forks.run(
        [sys.executable, "-m", "cachetool", "gc", "--cache-dir", str(root), "--min-age", "0", "-y", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_home_folder_is_refused_and_forced_gc_still_removes_no_user_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    made = _user_tree(home)
    env = {**hf_env(tmp_path), "HOME": str(home)}
    for args in (["--temp"], ["--include-sources", "--older-than", "0s"]):
        proc = _gc(env, home, *args)
        assert proc.returncode == 2
        assert proc.stderr.strip() == (
            f"Error: refusing to clean {home}: it is or holds your home folder; "
            "pass --force-root if you mean it"
        )
        forced = _gc(env, home, *args, "--force-root", "--json")
        assert forced.returncode == 0, forced.stderr
        assert json.loads(forced.stdout)["result"]["removed"] == []
    assert [p for p in made if not p.exists()] == []


def test_a_folder_without_datasets_layout_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    made = _user_tree(folder)
    env = hf_env(tmp_path)
    proc = _gc(env, folder, "--temp", "--json")
    assert proc.returncode == 0  # the temp dir is still cleaned; the folder is not touched
    assert json.loads(proc.stdout)["result"]["removed"] == []
    assert proc.stderr.strip() == (
        f"Warning: not cleaning {folder}: nothing in it looks like a datasets cache (no dataset "
        "folder, cache file or download); pass --force-root if you mean it"
    )
    proc = _gc(env, folder, "--older-than", "0s")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"Error: refusing to clean {folder}: nothing in it looks like a datasets cache (no dataset "
        "folder, cache file or download); pass --force-root if you mean it"
    )
    forced = _gc(env, folder, "--temp", "--force-root", "--include-sources", "--older-than", "0s", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["result"]["removed"] == []
    assert [p for p in made if not p.exists()] == []


def test_user_files_inside_a_real_cache_stay_while_its_leftovers_go(tmp_path: Path) -> None:
    """A cache root that also holds a user's folder: `gc --temp` removes the killed writer's
    tmp file in the dataset folder and nothing of the user's, even names that look like leftovers."""
    root = tmp_path / "cache"
    cache_files = synthesize_cache(root, 3)
    leftover = cache_files[0].parent / "tmpzz99yy88"
    leftover.write_bytes(b"\xff\xff\xff\xff\x10\x00\x00\x00")
    os.utime(leftover, (os.path.getmtime(leftover) - OLD,) * 2)
    made = _user_tree(root / "notes")
    proc = _gc(hf_env(tmp_path), root, "--temp", "--json")
    assert proc.returncode == 0, proc.stderr
    removed = [r["path"] for r in json.loads(proc.stdout)["result"]["removed"]]
    assert removed == [str(leftover)]
    assert [p for p in made if not p.exists()] == []
    proc = _gc(hf_env(tmp_path), root, "--include-sources", "--older-than", "0s", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [p for p in made if not p.exists()] == []
    assert not any(p.exists() for p in cache_files)  # the cache itself was evicted
