"""`cachetool dirs`: every location, resolved as `datasets` resolves it, and where it came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import invoke


def test_dirs_resolves_like_datasets_and_says_where_each_came_from(tmp_path: Path) -> None:
    env = {
        "HF_DATASETS_CACHE": "",
        "HF_HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": "/xdg",
        "TMPDIR": str(tmp_path),
        "HF_HUB_CACHE": "",
        "HF_MODULES_CACHE": "",
        "HF_DATASETS_DOWNLOADED_DATASETS_PATH": "",
    }
    doc = json.loads(invoke("dirs", "--json", env=env).stdout)
    locs = {d["name"]: (d["path"], d["source"]) for d in doc["locations"]}
    assert locs["datasets cache"] == (str(tmp_path / "home" / "datasets"), "HF_HOME")
    assert locs["hub cache"] == (str(tmp_path / "home" / "hub"), "HF_HOME")
    assert locs["temp dir"] == (str(tmp_path), "TMPDIR")
    env.update(HF_HOME="", HF_DATASETS_CACHE="/data/hf")
    locs = {
        d["name"]: (d["path"], d["source"])
        for d in json.loads(invoke("dirs", "--json", env=env).stdout)["locations"]
    }
    assert locs["datasets cache"] == ("/data/hf", "HF_DATASETS_CACHE")
    assert locs["HF home"] == ("/xdg/huggingface", "XDG_CACHE_HOME")
    assert invoke("dirs", "-q", "--cache-dir", "/flag", env=env).stdout.splitlines()[0] == "/flag"
    human = invoke("dirs", env=env).stdout
    assert "hf cache" in human and "HF_DATASETS_CACHE" in human


@pytest.mark.slow
def test_dirs_agrees_with_datasets_config(tmp_path: Path) -> None:
    """The cache root cachetool resolves is the one `datasets` itself uses, for each source."""
    cases = [
        {"HF_DATASETS_CACHE": str(tmp_path / "a")},
        {"HF_HOME": str(tmp_path / "b")},
        {"XDG_CACHE_HOME": str(tmp_path / "c")},
        {},
    ]
    for extra in cases:
        env = {
            k: v for k, v in os.environ.items() if k not in ("HF_DATASETS_CACHE", "HF_HOME", "XDG_CACHE_HOME")
        }
        env.update(extra)
        ours = subprocess.run(
            [sys.executable, "-m", "cachetool", "dirs", "-q"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()[0]
        theirs = subprocess.run(
            [sys.executable, "-c", "import datasets.config as c; print(c.HF_DATASETS_CACHE)"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert ours == theirs, extra
