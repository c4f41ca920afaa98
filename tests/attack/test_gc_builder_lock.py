"""gc evicts a builder folder only under its builder lock, as `datasets` prepares it."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cachetool.cli.app import app
from cachetool.maintenance.gc import GcOptions
from cachetool.maintenance.gc.plan import plan_gc
from tests.attack.races import synthesize_cache


def _source_folder(root: Path) -> Path:
    (cache_file,) = synthesize_cache(root, 1)
    shutil.copy(cache_file, cache_file.parent / "csv-train.arrow")
    return cache_file.parent


def test_a_builder_folder_goes_under_its_builder_lock(tmp_path: Path, isolated_env: Path) -> None:
    """While a process holds `<hash>_builder.lock` (a `load_dataset` preparing the folder again,
    which ends with `rmtree` of the old one), `gc --include-sources` keeps the source split, says
    why and exits 1; once the lock is free, the same command removes it. (Before, the two removed
    the same files at once and the pipeline died with FileNotFoundError: 1 in ~90 soak runs.)"""
    root = tmp_path / "cache"
    folder = _source_folder(root)
    plan = plan_gc(root, GcOptions(max_size=1, min_age=0, include_sources=True))
    (item,) = [i for i in plan.items if i.kind.value == "source"]
    lock = folder.with_name(folder.name + "_builder.lock")
    assert item.lock == lock
    lock.touch()
    args = ["gc", "--max-size", "1", "--min-age", "0", "--include-sources", "-y", "--cache-dir", str(root)]
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = CliRunner().invoke(app, [*args, "--json"])
        assert (folder / "csv-train.arrow").exists(), held.output
        skipped = json.loads(held.stdout)["result"]["skipped"]
        assert [s["reason"] for s in skipped if s["kind"] == "source"] == [
            "csv_builder.lock is held by a live process".replace("csv", folder.name)
        ]
    finally:
        os.close(fd)
    free = CliRunner().invoke(app, args)
    assert free.exit_code == 0, free.output
    assert not (folder / "csv-train.arrow").exists()


pytestmark = pytest.mark.slow
