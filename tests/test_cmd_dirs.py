"""`cachetool dirs`: every location, resolved as `datasets` resolves it, and where it came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forks
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


# `datasets.config`'s own HF_DATASETS_CACHE: its file run as `datasets` runs it (it imports nothing
# of the package), without importing the rest of `datasets` (0.8 s of pandas, pyarrow, ...).
DATASETS_CONFIG = (
    "import importlib.util, os\n"
    "folder = importlib.util.find_spec('datasets').submodule_search_locations[0]\n"
    "spec = importlib.util.spec_from_file_location('config', os.path.join(folder, 'config.py'))\n"
    "config = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(config)\n"
    "print(config.HF_DATASETS_CACHE)\n"
)


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
        ours = forks.run(
            [sys.executable, "-m", "cachetool", "dirs", "-q"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()[0]
        theirs = subprocess.run(
            [sys.executable, "-c", DATASETS_CONFIG],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert ours == theirs, extra


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
    result = invoke("dirs", columns=80, env=env)
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert lines[0].split()[:3] == ["location", "path", "from"]
    rows = dict((line[:20].strip(), line[20:]) for line in lines[1:] if line[:20].strip())
    assert rows["datasets cache"].split()[0] == "~/…/huggingface-cache/datasets"
    assert rows["downloads"].split()[0] == "~/projects/…/datasets/downloads"
    assert rows["modules"].split()[0] == "~/.cache/huggingface/modules"
    assert rows["temp dir"].split()[:2] == ["/tmp", "TMPDIR;"]
