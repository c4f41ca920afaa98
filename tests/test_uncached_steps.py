"""Steps that run without a persistent cache: a pipeline from `Dataset.from_dict` (or with
`keep_in_memory=True`, `disable_caching()`, `load_from_cache_file=False`) computes its maps and
filters again in every run. Run twice under `cachetool run`, `explain --last` and `stats` say so:
which steps, why, the time they took, how to make them reusable, and `stats` counts that time as
lost."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests.conftest import cachetool_run, invoke
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    from conftest import cachetool_run, invoke  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

PIPELINE = textwrap.dedent(
    """\
    import sys, time
    import datasets
    from datasets import Dataset, load_dataset

    def slow(ex):
        time.sleep(0.002)
        return {"y": ex["x"] * 2}

    mem = Dataset.from_dict({"x": list(range(100))})
    mem = mem.map(slow)
    mem = mem.filter(lambda ex: ex["y"] % 3 == 0)
    disk = load_dataset("csv", data_files=sys.argv[1], split="train")
    kept = disk.map(slow, keep_in_memory=True)
    again = disk.map(slow, load_from_cache_file=False)
    datasets.disable_caching()
    off = disk.map(lambda ex: {"z": ex["x"] + 1})
    """
)


def test_explain_and_stats_name_steps_without_a_persistent_cache(tmp_path: Path) -> None:
    """Second run: `explain --last` names each uncached step with its reason (in memory,
    keep_in_memory=True, load_from_cache_file=False, disable_caching()) and its time, says how to
    make them reusable, and no longer says "Nothing was recomputed"; `stats` counts them and adds
    their time to the time lost."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(100)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))

    def cli(*args: str) -> str:
        said = invoke(*args, env=env)
        assert said.exit_code == 0, said.stderr
        return str(said.stdout)

    cachetool_run("p.py", "d.csv", env=env, cwd=tmp_path, warm=True)
    cachetool_run("p.py", "d.csv", env=env, cwd=tmp_path, warm=True)
    human = cli("explain", "--last")
    assert "Nothing was recomputed" not in human
    assert "5 steps ran without a persistent cache" in human
    for reason in ("in memory", "keep_in_memory=True", "load_from_cache_file=False", "disable_caching()"):
        assert reason in human, reason
    assert "p.py:10" in human and "p.py:14" in human  # the map of the in-memory dataset, the re-map
    assert "save_to_disk" in human and "cache_file_name=" in human
    report = json.loads(cli("explain", "--last", "--json"))
    uncached = report["uncached"]
    assert sorted(u["reason"] for u in uncached) == sorted(
        ["in-memory", "in-memory", "keep-in-memory", "load-from-cache-file-false", "caching-disabled"]
    )
    assert all(u["duration"] > 0 for u in uncached)
    assert sum(u["duration"] for u in uncached if u["step"]["call_site"]["line"] == 10) >= 0.2  # 100 x 2 ms

    stats = json.loads(cli("stats", "--json"))
    assert stats["uncached"] == 10
    assert stats["uncached_seconds"] > 0.8
    # The second run's uncached time is time lost (the first run's is not: nothing was there).
    assert stats["recompute_seconds"] >= report["uncached_seconds"] - 0.001
    human_stats = cli("stats")
    assert "without a persistent cache" in human_stats
