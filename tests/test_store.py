"""The files cachetool keeps (in `<root>/.cachetool/`, and what it derives in the user's cache
folder) are written whole through a temporary file (`cachetool.cache.store`); a writer killed
between the two leaves `.read-index-*`, `.checksums-*` or `.schema-verdicts-*`
behind, and the next write of that file removes the ones older than an hour."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cachetool.cache.layout import LEDGER_DIR
from cachetool.cache.locations import derived_dir
from tests.attack.races import synthesize_cache
from tests.conftest import invoke

DERIVED = (".read-index-k1ll3d0",)
FOR_EVERY_CACHE = (".schema-verdicts-k1ll3d0",)
IN_ROOT = (".checksums-k1ll3d0",)


def _leave(folder: Path, names: tuple[str, ...], suffix: str, age: float) -> list[Path]:
    """The temporary files a killed writer of each kept file leaves, modified `age` seconds ago."""
    paths = [folder / (name + suffix) for name in names]
    for path in paths:
        path.write_bytes(b"half a write")
        os.utime(path, (time.time() - age, time.time() - age))
    return paths


@pytest.mark.slow
def test_leftovers_of_killed_writes_go_at_the_next_write(isolated_env: Path) -> None:
    """`ls` (read index) and `verify --deep --record` (checksums in the root, schema
    verdicts in the user's folder, one file for every cache) remove their files' temporary
    files older than an hour; younger ones (a write under way on another host, however
    unlikely) and other files of the folder stay."""
    root = isolated_env / "cache"
    synthesize_cache(root, 6)
    folder = root / LEDGER_DIR
    folder.mkdir(exist_ok=True)
    derived = derived_dir(root)
    assert derived is not None
    derived.mkdir(parents=True)
    every = derived.parent.parent  # the user's derived folder, above each root's
    old, young = [], []
    for suffix, age, into in (("", 2 * 3600, old), ("y", 60, young)):
        into += _leave(derived, DERIVED, suffix, age) + _leave(every, FOR_EVERY_CACHE, suffix, age)
        into += _leave(folder, IN_ROOT, suffix, age)
    mine = derived / ".read-index-notes.txt.d"
    mine.mkdir()
    os.utime(mine, (0, 0))
    for _ in range(2):  # the first listing writes the read index
        assert invoke("ls", str(root), "--json").exit_code == 0
    assert [p.name for p in old if p.exists()] == [".schema-verdicts-k1ll3d0", ".checksums-k1ll3d0"]
    assert invoke("verify", "--cache-dir", str(root), "--deep", "--record").exit_code == 0
    assert not [p for p in old if p.exists()]
    assert all(p.exists() for p in young) and mine.is_dir()


@pytest.mark.slow
def test_a_ledger_folder_that_is_a_symlink_is_never_cleaned(isolated_env: Path) -> None:
    """`<root>/.cachetool` pointing out of the root: what lies there is not the root's to remove,
    and nothing is written there (the read index and the checksums stay unwritten;
    `verify --record` says the checksums could not be stored)."""
    root = isolated_env / "cache"
    synthesize_cache(root, 6)
    elsewhere = isolated_env / "elsewhere"
    elsewhere.mkdir()
    (root / LEDGER_DIR).symlink_to(elsewhere)
    old = _leave(elsewhere, DERIVED + IN_ROOT, "", 2 * 3600)
    assert invoke("ls", str(root), "--json").exit_code == 0
    for _ in range(2):
        assert invoke("ls", str(root), "--json").exit_code == 0
    got = invoke("verify", "--cache-dir", str(root), "--deep", "--record")
    assert got.exit_code == 0 and "cannot store checksums: .cachetool is a symlink" in got.stdout
    assert all(p.exists() for p in old)
    assert sorted(os.listdir(elsewhere)) == sorted(p.name for p in old)  # nothing written there
