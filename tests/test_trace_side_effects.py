"""Tracing never changes what the program does to its own folders and descriptors: a folder the
program deleted stays deleted (the lease thread never recreates it), and a program that saves to
more folders than it may hold descriptors runs traced as it runs plain. A run of cache hits
imports none of the machinery only a miss needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests.conftest import cachetool_run
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    from conftest import cachetool_run  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

#: Saves to a folder and to a TemporaryDirectory, deletes both, waits through several lease
#: renewals (CACHETOOL_LEASE_SECONDS=0.6: one every 0.1 s), then renames a new folder onto the
#: deleted path, as a program that replaces its output atomically does.
DELETED = textwrap.dedent(
    """\
    import json, os, shutil, sys, tempfile, time
    from datasets import Dataset
    out = sys.argv[1]
    ds = Dataset.from_dict({"x": list(range(10))})
    ds.save_to_disk(out)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(out)) as tmp:
        ds.map(lambda ex: {"y": ex["x"] + 1}).save_to_disk(tmp)
        temp = tmp
    shutil.rmtree(out)
    time.sleep(1.0)
    seen = {"out": os.path.exists(out), "temp": os.path.exists(temp)}
    new = out + ".new"
    os.mkdir(new)
    open(os.path.join(new, "data"), "w").close()
    os.rename(new, out)
    print(json.dumps(dict(seen, renamed=sorted(os.listdir(out)))))
    """
)


def _run(mode: str, script: Path, out: Path, env: dict[str, str], warm: bool = False) -> dict[str, object]:
    """`script out` under `cachetool run` ("traced", forked warm with `warm`) or plain `python`
    ("plain"): its last line."""
    if mode == "traced":
        proc = cachetool_run(script, str(out), env=env, timeout=300, warm=warm)
    else:
        cmd = [sys.executable, os.fspath(script), str(out)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_a_deleted_folder_stays_deleted(tmp_path: Path) -> None:
    """A program saves to a folder and to a `TemporaryDirectory`, deletes both and waits through
    several lease renewals: under `cachetool run` neither folder comes back, renaming a new folder
    onto the deleted path works, and no empty folder is left behind after exit: exactly as plain
    `python` does."""
    script = tmp_path / "deleted.py"
    script.write_text(DELETED, encoding="utf-8")
    outputs: dict[str, dict[str, object]] = {}
    for mode in ("plain", "traced"):
        work = tmp_path / mode
        work.mkdir()
        env = subprocess_env(tmp_path / f"{mode}-env", CACHETOOL_LEASE_SECONDS="0.6")
        out = work / "out"
        outputs[mode] = _run(mode, script, out, env, warm=True)
        assert sorted(p.name for p in work.iterdir()) == ["out"], mode
        assert sorted(p.name for p in out.iterdir()) == ["data"], mode
    assert outputs["traced"] == outputs["plain"] == {"out": False, "temp": False, "renamed": ["data"]}


#: Saves one small dataset to 80 folders with at most 64 open descriptors.
MANY_FOLDERS = textwrap.dedent(
    """\
    import json, os, resource, sys
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    from datasets import Dataset
    ds = Dataset.from_dict({"x": list(range(3))})
    for i in range(80):
        ds.save_to_disk(os.path.join(sys.argv[1], str(i)))
    print(json.dumps({"saved": len(os.listdir(sys.argv[1])), "fds": len(os.listdir("/proc/self/fd"))}))
    """
)


def test_saving_to_more_folders_than_open_files_allowed_works_traced(tmp_path: Path) -> None:
    """A program limited to 64 open files saves to 80 folders: under `cachetool run` it works as
    it does plain (no "Too many open files"), each folder's ledger records its save, and the
    traced process holds few more descriptors than the plain one."""
    script = tmp_path / "many.py"
    script.write_text(MANY_FOLDERS, encoding="utf-8")
    outputs: dict[str, dict[str, object]] = {}
    for mode in ("plain", "traced"):
        out = tmp_path / mode
        outputs[mode] = _run(mode, script, out, subprocess_env(tmp_path / f"{mode}-env"), warm=True)
    assert outputs["plain"]["saved"] == outputs["traced"]["saved"] == 80
    assert int(str(outputs["traced"]["fds"])) <= int(str(outputs["plain"]["fds"])) + 40
    ledgers = [p / ".cachetool" / "ledger" for p in (tmp_path / "traced").iterdir()]
    assert sum(1 for ledger in ledgers if list(ledger.glob("*.jsonl"))) == 80


#: Three maps of a csv, then the cachetool modules the process imported.
HITS = textwrap.dedent(
    """\
    import json, os, sys
    from datasets import load_dataset
    def add(ex, k):
        return {"v": ex["x"] + k}
    here = os.path.dirname(os.path.abspath(__file__))
    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    for k in range(3):
        ds = ds.map(add, fn_kwargs={"k": k})
    print(json.dumps(sorted(m for m in sys.modules if m.startswith("cachetool"))))
    """
)

#: What only a step that computes (resume, re-key, the remote), a loaded file of a name of the
#: user's (the stale checks, the ledger), or a determinism run (hash trees) needs.
MISS_ONLY = (
    "cachetool.trace.resume",
    "cachetool.trace.rekey",
    "cachetool.remote",
    "cachetool.history.explain.stale",
    "cachetool.history.ledger",
    "cachetool.cache.model",
    "cachetool.fingerprint.tree",
)


def test_a_run_of_cache_hits_imports_nothing_only_a_miss_needs(tmp_path: Path) -> None:
    """`cachetool run` of a pipeline whose every step is a cache hit imports neither resume nor
    re-key, the stale-result checks, the ledger reader nor the hash trees (the run's start-up is
    most of what tracing costs there); the first run, whose maps compute, imports resume."""
    script = tmp_path / "hits.py"
    script.write_text(HITS, encoding="utf-8")
    (tmp_path / "data.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    env = subprocess_env(tmp_path / "env")
    imported = [json.loads(cachetool_run(script, env=env).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert "cachetool.trace.resume" in imported[0]
    assert [m for m in imported[1] if m.startswith(MISS_ONLY)] == []
