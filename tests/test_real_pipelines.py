"""Failures found running real `datasets` pipelines under `cachetool run`, each reproduced as a
user met it: one pipeline (CSV load, map, cast_column, train_test_split, DatasetDict.save_to_disk,
and a map killed mid-write), run in a cache A, then in a fresh cache B, by real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import forks
from tests.conftest import cachetool_run, hf_env

PIPELINE = textwrap.dedent(
    """\
    import json
    import os
    import signal
    import sys

    import datasets
    from datasets import Value, load_dataset

    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1]


    def add_len(ex):
        return {"n": len(ex["text"])}


    def die_midway(ex, idx):
        # A crash (OOM kill, kill -9) in the middle of a map: datasets leaves its tmp file behind.
        if idx == 300:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"m": idx}


    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    mapped = ds.map(add_len)
    cast = mapped.cast_column("n", Value("int64"))
    parts = cast.train_test_split(test_size=0.25, seed=0)
    parts.save_to_disk(os.path.join(out, "saved"))
    fps = {
        "csv": ds._fingerprint,
        "map": mapped._fingerprint,
        "cast": cast._fingerprint,
        "train": parts["train"]._fingerprint,
        "test": parts["test"]._fingerprint,
    }
    print(json.dumps(fps), flush=True)
    if len(sys.argv) > 2 and sys.argv[2] == "kill":
        mapped.map(die_midway, with_indices=True, writer_batch_size=10)
    """
)


@dataclass(frozen=True)
class Runs:
    base: Path
    env: dict[str, str]
    a: Path  # cache A: the pipeline ran there, then a map of it was killed mid-write
    b: Path  # cache B: fresh, the same pipeline ran once
    fps: dict[str, str]


def _run(base: Path, env: dict[str, str], cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cachetool_run(
        base / "project" / "pipeline.py",
        str(cache.parent),
        *args,
        env={**env, "HF_DATASETS_CACHE": str(cache)},
        cwd=base / "project",
        timeout=240,
        check=False,
        warm=True,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("pipelines")
    project = base / "project"
    project.mkdir()
    (project / "pipeline.py").write_text(PIPELINE, encoding="utf-8")
    rows = "".join(f"{i},w{'o' * (i % 7)}rd\n" for i in range(1000))
    (project / "data.csv").write_text("id,text\n" + rows, encoding="utf-8")
    env = hf_env(base)
    a, b = base / "A" / "cache", base / "B" / "cache"
    first = _run(base, env, a)
    assert first.returncode == 0, first.stderr[-3000:]
    killed = _run(base, env, a, "kill")
    assert killed.returncode == -9, killed.stderr[-3000:]
    fresh = _run(base, env, b)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    fps = json.loads(first.stdout.strip().splitlines()[-1])
    assert json.loads(fresh.stdout.strip().splitlines()[-1]) == fps
    return Runs(base, env, a, b, fps)


def cachetool(runs: Runs, *args: str) -> subprocess.CompletedProcess[str]:
    return forks.run(
        [sys.executable, "-m", "cachetool", *args],
        env={**runs.env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ok(proc: subprocess.CompletedProcess[str], *codes: int) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (codes or (0,)), proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_verify_after_gc_temp_is_the_readme_ci_sequence(runs: Runs) -> None:
    """`gc --temp` removes the leftover of the killed map (and logs it in the ledger with a file
    count); `verify`, `verify --json` and `verify --stale` then read that ledger without a
    traceback (they crashed with "TypeError: 'int' object is not iterable")."""
    gc = json.loads(
        _ok(cachetool(runs, "gc", "--temp", "--min-age", "0", "-y", "--json", "--cache-dir", str(runs.a)))
    )
    removed = gc["result"]["removed"]
    assert [r["kind"] for r in removed] == ["temp"], removed
    _ok(cachetool(runs, "verify", "--cache-dir", str(runs.a)))
    doc = json.loads(_ok(cachetool(runs, "verify", "--json", "--cache-dir", str(runs.a))))
    assert not [f for f in doc["findings"] if f["severity"] == "error"]
    _ok(cachetool(runs, "verify", "--stale", "--cache-dir", str(runs.a)))


@pytest.mark.slow
def test_a_fresh_cache_explains_its_own_run_not_another_caches(runs: Runs) -> None:
    """Cache B is empty when the pipeline runs there, so every step computes: `explain --last`
    says so for each, never "its fingerprint is not new" or "the source dataset changed" from
    cache A's records; `lineage` in B counts B's run only."""
    out = _ok(cachetool(runs, "explain", "--last", "--json", "--cache-dir", str(runs.b)))
    doc = json.loads(out)
    assert doc["steps"], out
    for step in doc["steps"]:
        assert [r["kind"] for r in step["reasons"]] == ["first-run"], step
        assert step["reasons"][0]["message"].startswith("first run recorded in this cache")
    human = _ok(cachetool(runs, "explain", "--last", "--cache-dir", str(runs.b)))
    assert "not new" not in human and "source dataset changed" not in human
    chain = json.loads(_ok(cachetool(runs, "lineage", runs.fps["map"], "--json", "--cache-dir", str(runs.b))))
    mapped = next(s for s in chain["steps"] if s["fingerprint"] == runs.fps["map"])
    assert (mapped["runs"], mapped["misses"], mapped["hits"]) == (1, 1, 0)
    assert all(s["root"] == str(runs.b) and not s["foreign"] for s in chain["steps"])
    both = json.loads(
        _ok(cachetool(runs, "lineage", runs.fps["map"], "--json", "--all-roots", "--cache-dir", str(runs.b)))
    )
    mapped = next(s for s in both["steps"] if s["fingerprint"] == runs.fps["map"])
    assert mapped["runs"] == 3  # asked for: A's two runs and B's, the latest labelled with its root


def _lineage(runs: Runs, fp: str, cache: Path) -> dict[str, Any]:
    return json.loads(_ok(cachetool(runs, "lineage", fp, "--json", "--cache-dir", str(cache))))


@pytest.mark.slow
def test_every_file_a_traced_run_wrote_has_its_parent(runs: Runs) -> None:
    """`cast_column` (which runs `cast`) and `train_test_split` (which runs `select`) made files in
    a traced run: without `--internal`, `lineage` of each of them reaches the CSV source, and
    every fingerprint `lineage` shows, `show` resolves too."""
    listing = json.loads(_ok(cachetool(runs, "ls", "--json", "--cache-dir", str(runs.b))))
    written = {e["fingerprint"] for e in listing["entries"] if e["kind"] in ("derived", "indices")}
    assert len(written) == 4, listing["entries"]  # map, cast (through its internal map), train, test
    for fp in sorted(written):
        doc = _lineage(runs, fp, runs.b)
        first = doc["steps"][0]
        assert first["recorded"] and first["fingerprint"] == runs.fps["csv"], (fp, doc["steps"])
        assert all(s["recorded"] for s in doc["steps"]), (fp, doc["steps"])
    doc = _lineage(runs, runs.fps["train"], runs.b)
    shown = [s["fingerprint"] for s in doc["steps"]]
    assert shown[0] == runs.fps["csv"] and runs.fps["cast"] in shown
    for fp in shown:
        show = json.loads(_ok(cachetool(runs, "show", fp, "--json", "--cache-dir", str(runs.b))))
        assert fp in (show["fingerprint"], *show.get("aliases", ())) or fp in {
            r["result"] for r in show["records"]
        }, show


@pytest.mark.slow
def test_stats_counts_the_saves_of_a_pipeline(runs: Runs) -> None:
    """The pipeline saved its DatasetDict once per run: `stats` of the cache counts those saves
    (it said "Saves 0": saves are recorded in the saved folder's own ledger)."""
    doc = json.loads(_ok(cachetool(runs, "stats", "--json", "--cache-dir", str(runs.b))))
    assert doc["saves"] >= 1, doc
    human = _ok(cachetool(runs, "stats", "--cache-dir", str(runs.b)))
    assert "Saves 0" not in " ".join(human.split())


@pytest.mark.slow
def test_the_typed_records_serialize_exactly_what_the_writers_wrote(runs: Runs) -> None:
    """Every line the tracer and gc wrote in both caches parses into its record class, and the
    class writes it back as the same JSON object: a writer can build the classes instead of dicts
    without changing a byte of meaning, and no field has two types."""
    from cachetool.history.ledger import iter_segments, parse_record

    roots = [runs.a, runs.b, runs.a.parent / "saved", runs.b.parent / "saved"]
    seen: set[str] = set()
    for root in roots:
        for seg in iter_segments(root):
            for line in seg.read_text(encoding="utf-8").splitlines():
                raw = json.loads(line)
                assert parse_record(raw).to_json() == raw, raw
                seen.add(raw["type"])
    assert {"transform", "root", "save", "source"} <= seen


@pytest.mark.slow
def test_a_file_an_internal_step_reused_keeps_its_parent(runs: Runs) -> None:
    """Cache A ran the pipeline twice (the second run loaded every step from the cache):
    `lineage` of the file `cast_column` wrote through its internal `map` still reaches the CSV
    source, and does not say "parent not recorded — run the pipeline with `cachetool run`" (it
    did, once the latest run had reused the file instead of writing it)."""
    listing = json.loads(_ok(cachetool(runs, "ls", "--json", "--cache-dir", str(runs.a))))
    written = {e["fingerprint"] for e in listing["entries"] if e["kind"] in ("derived", "indices")}
    assert len(written) >= 4, listing["entries"]
    for fp in sorted(written):
        doc = _lineage(runs, fp, runs.a)
        assert all(s["recorded"] for s in doc["steps"]), (fp, doc["steps"])
        assert doc["steps"][0]["fingerprint"] == runs.fps["csv"], (fp, doc["steps"])
    internal = [fp for fp in written if fp not in runs.fps.values()]
    assert internal, written  # the file cast_column wrote under its internal map's fingerprint
    step = _lineage(runs, internal[0], runs.a)["steps"][-1]
    assert step["runs"] == 2 and step["hits"] == 1, step
