"""`explain` of a saved DatasetDict mapped per split: each split's step is compared with that
split's own earlier state. (Steps were matched by call site alone, so when their input changed,
both splits were compared with the test split's earlier step: the train split's map read "the
saved dataset at saved/train holds another state (<test's> → <train's>)".)"""

from __future__ import annotations

import json
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

# Saved once (SAVE=1), then reloaded: the same call sites map both splits (DatasetDict.map).
PIPELINE = textwrap.dedent(
    """\
    import json
    import os

    from datasets import load_dataset, load_from_disk

    here = os.path.dirname(os.path.abspath(__file__))
    saved = os.path.join(here, "saved")


    def scale(ex, factor):
        return {"y": ex["x"] * factor}


    def add_one(ex):
        return {"z": ex["y"] + 1}


    if os.environ.get("SAVE"):
        ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
        ds.train_test_split(test_size=0.25, seed=0).save_to_disk(saved)
    dd = load_from_disk(saved)
    scaled = dd.map(scale, fn_kwargs={"factor": int(os.environ["FACTOR"])})
    out = scaled.map(add_one)
    print(json.dumps({k: [scaled[k]._fingerprint, out[k]._fingerprint] for k in out}))
    """
)


def _run(project: Path, env: dict[str, str], **extra: str) -> dict[str, list[str]]:
    proc = cachetool_run(project / "pipeline.py", env={**env, **extra}, cwd=project, timeout=240, warm=True)
    out: dict[str, list[str]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_each_split_is_compared_with_its_own_earlier_state(tmp_path: Path) -> None:
    """Two runs of a reloaded DatasetDict with a changed argument upstream: explain --last of the
    saved folder compares each split's steps with the same split's steps of the run before, and
    the downstream step says its input changed because of the argument, nothing else."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "data.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(40)), encoding="utf-8")
    (project / "pipeline.py").write_text(PIPELINE, encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"), COLUMNS="80")
    first = _run(project, env, SAVE="1", FACTOR="2")
    second = _run(project, env, FACTOR="3")
    assert set(first) == {"train", "test"}

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cachetool",
            "explain",
            "--last",
            "--json",
            "--cache-dir",
            str(project / "saved"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    steps = {s["fingerprint"]: s for s in json.loads(proc.stdout)["steps"]}
    for split in ("train", "test"):
        for i in (0, 1):
            got = steps[second[split][i]]
            assert got["compared_with"]["fingerprint"] == first[split][i], (split, i, got)
        downstream = [r["message"] for r in steps[second[split][1]]["reasons"]]
        assert len(downstream) == 1 and "changed 2 → 3" in downstream[0], downstream
        assert "holds another state" not in downstream[0]
