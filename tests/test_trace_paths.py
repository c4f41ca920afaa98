"""Where the tracer writes: fsspec-style URLs given to `save_to_disk` / `load_from_disk` (as
`DatasetDict.load_from_disk` passes `file:///…/train` to `Dataset.load_from_disk`) never become
folders in the user's working directory, local URLs count as the paths they name, and steps on a
non-local file system are recorded in the running process's cache root."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests import forks
    from tests.conftest import cachetool_run
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    import forks  # type: ignore[no-redef]
    from conftest import cachetool_run  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

PIPELINE = textwrap.dedent(
    """\
    import json, sys
    from datasets import Dataset, DatasetDict, load_dataset
    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    ds = ds.map(lambda ex: {"y": ex["id"] * 2})
    dd = ds.train_test_split(test_size=0.25, seed=1)
    dd.save_to_disk(sys.argv[2])
    loaded = DatasetDict.load_from_disk(sys.argv[2])
    after = loaded["train"].map(lambda ex: {"z": ex["y"] + 1})
    ds.save_to_disk("memory://bucket/ds")
    back = Dataset.load_from_disk("memory://bucket/ds")
    print(json.dumps({"train": dd["train"]._fingerprint, "after": after._fingerprint}))
    """
)


@dataclass(frozen=True)
class Traced:
    base: Path
    work: Path
    saved: Path
    env: dict[str, str]
    fps: dict[str, str]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Traced:
    """The pipeline above, run once under `cachetool run` from an empty working directory."""
    tmp_path = tmp_path_factory.mktemp("paths")
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(8)), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    saved = tmp_path / "saved"
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    proc = cachetool_run(
        tmp_path / "p.py", str(tmp_path / "d.csv"), str(saved), env=env, cwd=work, timeout=180, warm=True
    )
    assert "cachetool: warning" not in proc.stderr
    return Traced(tmp_path, work, saved, env, json.loads(proc.stdout.strip().splitlines()[-1]))


def test_fsspec_urls_are_paths_or_the_cache_root_never_folders_in_the_cwd(traced: Traced) -> None:
    """`DatasetDict.load_from_disk` and a save to / load from `memory://` under `cachetool run`:
    the working directory stays as it was (no `file:` or `memory:` folders), cachetool writes
    only in the cache root, the saved folder and its state folder, the loads of `file:///…/train`
    are recorded in the saved folder with the saved state as parent, and `lineage` of a map after
    the load goes back to the csv source."""
    tmp_path, work, saved, env, fps = traced.base, traced.work, traced.saved, traced.env, traced.fps
    assert list(work.iterdir()) == []
    segments = list(tmp_path.rglob("ledger/*.jsonl"))
    ledgers = sorted(str(p.parent.parent.parent.relative_to(tmp_path)) for p in segments)
    assert ledgers == ["cache", "saved"]

    records = [json.loads(line) for p in segments for line in p.read_text(encoding="utf-8").splitlines()]
    loads = [r for r in records if r.get("operation") == "load_from_disk"]
    local = [r for r in loads if r["source"]["path"].startswith(str(saved))]
    assert sorted(r["source"]["path"] for r in local) == [str(saved / "test"), str(saved / "train")]
    assert {r["root"] for r in local} == {str(saved)}
    train_load = next(r for r in local if r["source"]["path"] == str(saved / "train"))
    assert train_load["parents"] == [fps["train"]]
    remote = [r for r in loads if r not in local]
    assert [r["source"]["path"] for r in remote] == ["memory://bucket/ds"]
    assert remote[0]["root"] == str(tmp_path / "cache")
    save = [r for r in records if r.get("type") == "save" and "memory" in r["source"]["path"]]
    assert [(r["source"]["path"], r["root"]) for r in save] == [("memory://bucket/ds", remote[0]["root"])]

    lineage = forks.run(
        [sys.executable, "-m", "cachetool", "lineage", fps["after"], "--json"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lineage.returncode == 0, lineage.stderr
    steps = json.loads(lineage.stdout)["steps"]
    assert steps[0]["source"]["kind"] == "builder" and steps[-1]["fingerprint"] == fps["after"]
    assert fps["train"] in [s["fingerprint"] for s in steps]


def _cli(traced: Traced, *args: str) -> subprocess.CompletedProcess[str]:
    proc = forks.run(
        [sys.executable, "-m", "cachetool", *args],
        env=traced.env,
        cwd=traced.work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_cachetools_own_files_are_never_listed(traced: Traced) -> None:
    """`ls` of the saved DatasetDict, of one of its splits, of the cache root (with a pin), of a
    folder holding only cachetool's state, and of the state folder itself: no entry is a ledger
    segment, the read index or pins.json, so `gc $(cachetool ls -q …)` cannot name them."""
    _cli(traced, "pin", traced.fps["after"], "--cache-dir", str(traced.saved))
    _cli(traced, "pin", traced.fps["train"], "--cache-dir", str(traced.base / "cache"))
    state_only = traced.base / "state-only"
    shutil.copytree(traced.saved / ".cachetool", state_only / ".cachetool")
    folders = [
        traced.saved,
        traced.saved / "train",
        traced.base / "cache",
        state_only,
        traced.saved / ".cachetool",
        traced.base / "cachetool_home",
    ]
    for folder in folders:
        assert any(folder.rglob("*.json*")), folder  # cachetool's files are there to be left out
        human = _cli(traced, "ls", str(folder)).stdout
        quiet = _cli(traced, "ls", "-q", str(folder)).stdout.split()
        listed = json.loads(_cli(traced, "ls", "--json", str(folder)).stdout)
        paths = [e["path"] for e in listed["entries"]]
        assert ".jsonl" not in human and "read-index" not in human and "pins" not in human
        assert [p for p in paths + quiet if ".cachetool" in p or "cachetool_home" in p] == [], folder
    assert len(_cli(traced, "ls", "-q", str(traced.saved)).stdout.split()) == 3


CACHE_DIR_URL = textwrap.dedent(
    """\
    import json, sys
    from datasets import load_dataset
    ds = load_dataset("csv", data_files=sys.argv[1], split="train", cache_dir="file://" + sys.argv[2])
    ds = ds.map(lambda ex: {"y": ex["id"] * 2})
    print(json.dumps({"map": ds._fingerprint}))
    """
)


def test_load_dataset_with_a_file_url_as_cache_dir_records_in_that_cache(tmp_path: Path) -> None:
    """`load_dataset(..., cache_dir="file:///…/cache")` then a map, under `cachetool run`: the
    working directory stays empty (no `file:` folder), the load and the map are recorded in the
    ledger of the cache the URL names, and `lineage` there goes from the map back to the csv."""
    (tmp_path / "p.py").write_text(CACHE_DIR_URL, encoding="utf-8")
    (tmp_path / "d.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(8)), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    cache = tmp_path / "cache"
    env = subprocess_env(tmp_path)
    csv = str(tmp_path / "d.csv")
    proc = cachetool_run(tmp_path / "p.py", csv, str(cache), env=env, cwd=work, timeout=180, warm=True)
    fp = json.loads(proc.stdout.strip().splitlines()[-1])["map"]
    assert list(work.iterdir()) == []
    records = [json.loads(line) for p in cache.glob(".cachetool/ledger/*.jsonl") for line in p.open()]
    assert {r["root"] for r in records if r.get("operation") in ("load_dataset", "map")} == {str(cache)}
    lineage = forks.run(
        [sys.executable, "-m", "cachetool", "lineage", fp, "--cache-dir", str(cache), "--json"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lineage.returncode == 0, lineage.stderr
    steps = json.loads(lineage.stdout)["steps"]
    assert steps[0]["source"]["kind"] == "builder" and steps[-1]["fingerprint"] == fp
