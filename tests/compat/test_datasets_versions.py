"""One real pipeline and every command that reads what tracing recorded, on whichever `datasets`
is installed: `nox -s compat` runs this file once per `datasets` line (2.14, 2.21, 3.6, 4.8, 5.2),
each in its own environment. The main suite skips it (`CACHETOOL_COMPAT` unset): it only repeats
there what the other tests check on the one installed version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.compat,
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get("CACHETOOL_COMPAT"), reason="run per datasets version by nox"),
]

PIPELINE = textwrap.dedent(
    """\
    import json, sys
    from datasets import DatasetDict, load_dataset

    def double(batch):
        return {"y": [i * 2 for i in batch["id"]]}

    def words(ex):
        return {"n": len(ex["text"].split())}

    if __name__ == "__main__":
        data, saved = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
        ds = load_dataset("csv", data_files=data, split="train")
        ds = ds.map(double, batched=True)
        ds = ds.map(words, num_proc=2)
        ds = ds.filter(lambda ex: ex["n"] > 1)
        ds = ds.shuffle(seed=0).select(range(20))
        dd = ds.train_test_split(test_size=0.25, seed=1)
        if saved is not None:
            dd.save_to_disk(saved)
            dd = DatasetDict.load_from_disk(saved)
        after = dd["train"].map(lambda ex: {"z": ex["y"] + 1})
        print(json.dumps({"select": ds._fingerprint, "train": dd["train"]._fingerprint,
                          "after": after._fingerprint}))
    """
)

FROZENSET = textwrap.dedent(
    """\
    from datasets import Dataset

    def make_cleaner():
        stop = frozenset(["a", "an", "the", "of", "to", "in", "on", "and", "or", "is", "it", "at"])

        def clean(example):
            return {"text": " ".join(w for w in example["text"].split() if w not in stop)}

        return clean

    ds = Dataset.from_dict({"text": ["the cat is on the mat", "a dog and a cat", "it rains in spain"]})
    print(ds.map(make_cleaner())._fingerprint)
    """
)

#: Deterministic: a ClassLabel cast, a seeded split, a save and a reload, a map and a filter of the
#: reloaded DatasetDict (a warm run records fewer of datasets' internal calls than a cold one).
CLASSLABEL = textwrap.dedent(
    """\
    import sys
    from datasets import ClassLabel, load_dataset, load_from_disk

    data, saved = sys.argv[1], sys.argv[2]
    ds = load_dataset("csv", data_files=data, split="train")
    ds = ds.map(lambda ex: {"label": ("neg", "pos")[ex["id"] % 2]})
    ds = ds.cast_column("label", ClassLabel(names=["neg", "pos"]))
    dd = ds.train_test_split(test_size=0.25, seed=0)
    dd.save_to_disk(saved)
    dd = load_from_disk(saved)
    dd = dd.map(lambda ex: {"n": len(ex["text"])})
    dd = dd.filter(lambda ex: ex["n"] > 5)
    print({k: v._fingerprint for k, v in dd.items()})
    """
)


@dataclass(frozen=True)
class Run:
    base: Path
    env: dict[str, str]
    fps: dict[str, str]
    stderr: str


def _env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CACHETOOL_", "PYTHONHASHSEED"))}
    env.update(
        HF_HOME=str(base / "hf_home"),
        HF_DATASETS_CACHE=str(base / "cache"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        CACHETOOL_HOME=str(base / "cachetool_home"),
        TMPDIR=str(base / "tmp"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    (base / "tmp").mkdir(exist_ok=True)
    return env


def cachetool(run: Run, *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", *args],
        env=run.env,
        cwd=run.base,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in ok, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    base = tmp_path_factory.mktemp("compat")
    (base / "pipeline.py").write_text(PIPELINE, encoding="utf-8")
    (base / "frozenset_script.py").write_text(FROZENSET, encoding="utf-8")
    (base / "classlabel.py").write_text(CLASSLABEL, encoding="utf-8")
    words = ["alpha", "beta", "gamma", "delta"]
    rows = "".join(f"{i},{' '.join(words[: 1 + i % 4])}\n" for i in range(60))
    (base / "data.csv").write_text("id,text\n" + rows, encoding="utf-8")
    env = _env(base)
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", "run", "pipeline.py", "data.csv", str(base / "saved")],
        env=env,
        cwd=base,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return Run(base, env, json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr)


def test_tracing_is_on_and_records_the_whole_chain(run: Run) -> None:
    """No warning that tracing is off; the lineage of the map after `load_from_disk` goes back
    through the saved split, the select, shuffle, filter and both maps to the csv source."""
    assert "tracing is off" not in run.stderr
    out = json.loads(cachetool(run, "lineage", run.fps["after"], "--json").stdout)
    fps = [s["fingerprint"] for s in out["steps"]]
    ops = [s["operation"] for s in out["steps"]]
    assert fps[-1] == run.fps["after"] and run.fps["select"] in fps
    assert out["steps"][0]["source"]["kind"] == "builder"
    for op in ("map", "filter", "shuffle", "select"):
        assert op in ops, ops
    assert ops.count("map") >= 3, ops


def test_listing_verify_gc_and_explain_read_the_cache(run: Run) -> None:
    """`ls`, `verify --deep`, `gc --temp` and `explain --last` succeed on this version's cache."""
    listed = json.loads(cachetool(run, "ls", "--json").stdout)
    assert listed["entries"]
    saved = cachetool(run, "ls", "-q", str(run.base / "saved")).stdout.split()
    assert len(saved) >= 2
    cachetool(run, "verify", "--deep")
    cachetool(run, "gc", "--temp", "--min-age", "0", "--yes")
    explained = cachetool(run, "explain", "--last").stdout
    assert "map" in explained


def test_check_determinism_tells_a_deterministic_script_from_a_frozenset(run: Run) -> None:
    """The pipeline is deterministic (exit 0); a closure over a frozenset is not (exit 1)."""
    cachetool(run, "check-determinism", "--runs", "2", "pipeline.py", "data.csv")
    report = cachetool(run, "check-determinism", "--runs", "2", "frozenset_script.py", ok=(1,)).stdout
    assert "frozenset" in report


@pytest.mark.parametrize(
    "mode", [(), ("--no-cold",), ("--isolated",)], ids=["default", "no-cold", "isolated"]
)
def test_check_determinism_passes_a_classlabel_split_saved_and_reloaded(
    run: Run, mode: tuple[str, ...]
) -> None:
    """csv -> cast_column(ClassLabel) -> train_test_split -> save_to_disk -> load_from_disk -> map ->
    filter is deterministic on this version too: exit 0, no cause, in every mode."""
    saved = str(run.base / f"classlabel-saved{'-'.join(('', *mode))}")
    proc = cachetool(run, "check-determinism", "classlabel.py", *mode, "--", "data.csv", saved)
    assert "0 differ" in proc.stdout and "cause" not in proc.stdout, proc.stdout


def test_the_saved_folder_is_named_as_a_cache_root_of_its_own(run: Run) -> None:
    """The map after `load_from_disk` wrote into the saved folder on this version too: `show` of
    it in the datasets cache names that folder and the command that shows it there, which does;
    `dirs` lists the folder."""
    after = run.fps["after"]
    saved = str((run.base / "saved").resolve())
    failed = cachetool(run, "show", after, ok=(2,))
    assert f"`cachetool show {after} --cache-dir {saved}`" in failed.stderr, failed.stderr
    shown = json.loads(cachetool(run, "show", after, "--json", "--cache-dir", saved).stdout)
    assert shown["fingerprint"] == after
    locations = json.loads(cachetool(run, "dirs", "--json").stdout)["locations"]
    assert {"name": "saved folder", "path": saved} in [
        {"name": loc["name"], "path": loc["path"]} for loc in locations
    ], locations


def test_the_frozenset_hint_offers_only_fixes_that_work_on_this_version(run: Run) -> None:
    """The hint for a closure over a frozenset names a sorted tuple, which works on every version,
    and a set only with the version from which `datasets` sorts sets (2.15): the script with a
    set is deterministic from 2.15 on and not before. It said "use a set (datasets sorts sets)"
    on 2.14 too, where that script still differs."""
    import datasets

    report = " ".join(cachetool(run, "check-determinism", "frozenset_script.py", ok=(1,)).stdout.split())
    assert "use a sorted tuple" in report and "use a set (datasets sorts sets)" not in report, report
    assert "datasets 2.15 or later" in report, report
    (run.base / "set_script.py").write_text(FROZENSET.replace("frozenset(", "set("), encoding="utf-8")
    sorts_sets = tuple(int(p) for p in datasets.__version__.split(".")[:2]) >= (2, 15)
    said = cachetool(run, "check-determinism", "set_script.py", ok=(0,) if sorts_sets else (1,)).stdout
    if not sorts_sets:  # the set is the culprit now: the hint says why, and what works here
        said = " ".join(said.split())
        assert "before 2.15" in said and "sorted tuple" in said, said
