"""`cachetool demo`: a real cache built, listed and explained, its output compared whole."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import hf_env
from tests.test_output import check, run_process


@pytest.fixture
def fixed_folder() -> Iterator[Path]:
    """`/tmp/cachetool-golden-demo`, emptied, for this test alone: the demo hashes its CSV's path,
    so its fingerprints are the same only in the same folder (sessions take turns)."""
    from filelock import FileLock

    folder = Path("/tmp/cachetool-golden-demo")
    with FileLock("/tmp/cachetool-golden-demo.lock"):
        shutil.rmtree(folder, ignore_errors=True)
        yield folder
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_demo(fixed_folder: Path, tmp_path: Path) -> None:
    """`demo`: builds the cache, lists it, prints the lineage of its last step and what
    `gc --temp` would remove, then hints where to look next. Its caches are not added to the
    user's registry of roots: `dirs` does not list them afterwards."""
    check("demo", run_process(["demo", str(fixed_folder)], tmp_path))
    dirs = subprocess.run(
        [sys.executable, "-m", "cachetool", "dirs", "--json"],
        env=hf_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dirs.returncode == 0, dirs.stderr
    assert str(fixed_folder) not in dirs.stdout


def test_demo_never_overwrites_a_file_of_yours(tmp_path: Path) -> None:
    """`cachetool demo FOLDER` where FOLDER holds your own `pipeline.py` (or `reviews.csv`) is
    refused (exit 2, one line) and leaves the file as it was (it was replaced by the demo's)."""
    from tests.conftest import invoke

    for name in ("pipeline.py", "reviews.csv"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / name).write_text("my own work\n", encoding="utf-8")
        result = invoke("demo", str(folder))
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
        assert (folder / name).read_text(encoding="utf-8") == "my own work\n"
