"""A new user's pipeline, run as they would run it: CSV, JSON and Parquet loads, maps with and
without `num_proc`, filter, shuffle, select, sort, cast_column, train_test_split, a DatasetDict
saved, loaded and mapped again, all under `cachetool run`, twice (the second run loads every step
from the cache); then the commands a user runs on that cache. Each test is a failure met there."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import forks
from tests.conftest import hf_env

PIPELINE = textwrap.dedent(
    """\
    import os
    import sys

    from datasets import Value, load_dataset, load_from_disk

    here = os.path.dirname(os.path.abspath(__file__))


    def add_len(ex):
        return {"n": len(ex["text"].split())}


    def upper(batch):
        return {"up": [t.upper() for t in batch["text"]]}


    def keep_long(ex):
        return ex["n"] > 2


    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    js = load_dataset("json", data_files=os.path.join(here, "data.jsonl"), split="train")
    pq = load_dataset("parquet", data_files=os.path.join(here, "data.parquet"), split="train")
    ds = ds.map(add_len).map(upper, batched=True, num_proc=2).filter(keep_long)
    ds = ds.shuffle(seed=42).select(range(100)).sort("id").cast_column("id", Value("int32"))
    parts = ds.train_test_split(test_size=0.2, seed=1)
    parts.save_to_disk(sys.argv[1])
    again = load_from_disk(sys.argv[1])["train"].map(add_len, num_proc=2)
    js.map(add_len, num_proc=2).filter(keep_long)
    pq.map(upper, batched=True)
    """
)


@dataclass(frozen=True)
class Pipeline:
    base: Path
    env: dict[str, str]
    cache: Path
    saved: Path


def cachetool(p: Pipeline, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """`cachetool ARGS` in the project folder, forked from a warm parent (`run` from one holding
    what `datasets` imports: its runs share one hash seed, and
    `test_check_determinism_of_a_deterministic_pipeline_warns_of_nothing` shows the pipeline's
    fingerprints do not depend on it); `check-determinism`, which compares runs under different
    hash seeds, stays a fresh interpreter."""
    argv = [sys.executable, "-m", "cachetool", *args]
    env, cwd = {**p.env, "COLUMNS": str(columns)}, p.base / "project"
    if args[0] == "check-determinism":
        return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=240)
    preload = forks.PIPELINE if args[0] == "run" else ()
    return forks.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=240, preload=preload)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = tmp_path_factory.mktemp("user")
    project = base / "project"
    project.mkdir()
    (project / "pipeline.py").write_text(PIPELINE, encoding="utf-8")
    words = ["the", "cat", "sat", "on", "a", "mat"]
    rows = [{"id": i, "text": " ".join(words[: 1 + i % 6])} for i in range(300)]
    (project / "data.csv").write_text(
        "id,text\n" + "".join(f"{r['id']},{r['text']}\n" for r in rows), encoding="utf-8"
    )
    (project / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(rows), project / "data.parquet")
    env = hf_env(base)
    p = Pipeline(base, env, base / "cache", base / "saved")
    for _ in range(2):
        done = cachetool(p, "run", "pipeline.py", str(p.saved))
        assert done.returncode == 0, done.stderr[-3000:]
    return p


def _ok(proc: subprocess.CompletedProcess[str], *codes: int) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (codes or (0,)), (
        f"exit {proc.returncode}\n--- stdout:\n{proc.stdout}\n--- stderr:\n{proc.stderr}"  # whole, not cut
    )
    return proc.stdout


@pytest.mark.slow
def test_verify_finds_no_orphan_in_a_healthy_cache(pipeline: Pipeline) -> None:
    """The indices files of `sort` after a `select` (which writes no file) and of
    `train_test_split` after `cast_column` (whose data sits under its internal map's fingerprint)
    index data that is in the cache: `verify` reports nothing (it called them orphans "no longer
    in the cache" and printed `cachetool gc FP` hints that would have removed live files)."""
    doc = json.loads(_ok(cachetool(pipeline, "verify", "--json")))
    assert doc["findings"] == [], doc["findings"]


@pytest.mark.slow
def test_stats_loses_no_time_when_nothing_was_recomputed(pipeline: Pipeline) -> None:
    """The first run computed every step once and the second loaded all of them: no time was lost
    to recomputation. (`train_test_split` records its train and test splits at one call site, and
    `stats` counted the second as a recomputation of the first: "Time lost recomputing 13 ms"
    after a single run.)"""
    doc = json.loads(_ok(cachetool(pipeline, "stats", "--json")))
    assert doc["runs"] >= 2 and doc["hits"] > 0, doc
    assert doc["recompute_seconds"] == 0, [
        (s["key"], s["recompute_seconds"]) for s in doc["call_sites"] if s["recompute_seconds"]
    ]


KILLED_MAP = textwrap.dedent(
    """\
    import os
    import signal

    from datasets import load_dataset


    def die_midway(ex, idx):
        if idx == 150:  # a crash (OOM kill, kill -9) in the middle of a map
            os.kill(os.getpid(), signal.SIGKILL)
        return {"m": idx}


    here = os.path.dirname(os.path.abspath(__file__))
    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    ds.map(die_midway, with_indices=True, writer_batch_size=10)
    """
)


@pytest.mark.slow
def test_verify_hints_run_as_printed_at_80_columns(pipeline: Pipeline) -> None:
    """A map killed with SIGKILL left a temp file deep in the cache; `verify` at 80 columns
    prints a hint per finding, and each hint line pasted into a shell as printed does what it
    says: the command stands whole on one line (it was wrapped after `cachetool gc`, so a paste
    ran a bare `cachetool gc`, then the path as a command). After it, `verify` is green. The
    killed run's lease stays through `gc --temp --dry-run`, whose plan says it "would be removed"
    (it said "is removed")."""
    script = pipeline.base / "project" / "killed.py"
    script.write_text(KILLED_MAP, encoding="utf-8")
    killed = cachetool(pipeline, "run", str(script))
    assert killed.returncode == -9, killed.stderr[-2000:]
    leases = pipeline.cache / ".cachetool" / "leases"
    before = sorted(leases.iterdir())
    dry = _ok(cachetool(pipeline, "gc", "--temp", "--dry-run"))
    assert "its lease would be removed" in dry and "its lease is removed" not in dry, dry
    assert sorted(leases.iterdir()) == before and before  # a dry run removes nothing
    found = cachetool(pipeline, "verify")
    _ok(found)  # a leftover is a warning
    hints = [line.split("hint: ", 1)[1] for line in found.stdout.splitlines() if "hint: " in line]
    assert hints and all(h.startswith("cachetool gc ") for h in hints), found.stdout
    for pasted in hints:
        argv = shlex.split(pasted)
        _ok(cachetool(pipeline, *argv[1:], "--yes"))
    assert json.loads(_ok(cachetool(pipeline, "verify", "--json")))["findings"] == []


@pytest.mark.slow
def test_stats_tables_show_no_row_of_zeros(pipeline: Pipeline) -> None:
    """`select(range(...))` writes no file: `stats` counts it among "Steps without a cache file",
    and its tables show no row that says nothing (they had "(no file)  0  0  -  0 ms  0 Bytes");
    `--json` still lists every group."""
    human = _ok(cachetool(pipeline, "stats"))
    empty = [line for line in human.splitlines() if re.search(r"\s0\s+0\s+-\s+0 ms\s+0 Bytes$", line)]
    assert not empty, human
    doc = json.loads(_ok(cachetool(pipeline, "stats", "--json")))
    assert any(d["key"] == "(no file)" for d in doc["datasets"]), doc["datasets"]


@pytest.mark.slow
def test_a_num_proc_map_is_named_by_a_prefix(pipeline: Pipeline) -> None:
    """The result of `map(..., num_proc=2)` is named by a prefix of its fingerprint in `show`,
    `lineage`, `explain` and `pin`: the per-shard fingerprints the ledger records
    (`<fp>_00000_of_00002`) are parts of it, not other candidates (every command said "'fe19' is
    ambiguous: it matches 3 entries")."""
    listing = json.loads(_ok(cachetool(pipeline, "ls", "--json")))
    shards = [e["fingerprint"] for e in listing["entries"] if e["kind"] == "shards"]
    assert shards, listing["entries"]
    for fp in shards:
        prefix = fp[:8]
        assert json.loads(_ok(cachetool(pipeline, "show", prefix, "--json")))["fingerprint"] == fp
        assert json.loads(_ok(cachetool(pipeline, "lineage", prefix, "--json")))["fingerprint"] == fp
        _ok(cachetool(pipeline, "explain", prefix))
    _ok(cachetool(pipeline, "pin", shards[0][:8]))
    _ok(cachetool(pipeline, "unpin", shards[0][:8]))


@pytest.mark.slow
def test_a_saved_folder_named_by_its_path_is_read_in_its_own_root(pipeline: Pipeline) -> None:
    """`lineage <saved folder>/train` without `--cache-dir` reads the root that holds the path (the
    saved DatasetDict, with its ledger) and shows the chain back to the CSV source, as with
    `--cache-dir` (it said to retype the command with `--cache-dir`)."""
    train = str(pipeline.saved / "train")
    doc = json.loads(_ok(cachetool(pipeline, "lineage", train, "--json")))
    assert doc["steps"][0]["operation"] == "load_dataset" and all(s["recorded"] for s in doc["steps"])
    given = json.loads(
        _ok(cachetool(pipeline, "lineage", train, "--json", "--cache-dir", str(pipeline.saved)))
    )
    assert given["steps"] == doc["steps"]


@pytest.mark.slow
def test_show_of_a_step_in_the_saved_folder_names_its_cache_dir(pipeline: Pipeline) -> None:
    """The map after `load_from_disk` wrote its file into the saved folder, a cache root of its
    own. `show FP` and `pin FP` without `--cache-dir` (as `lineage FP` finds it) say which root
    records it and the command to run there; that command works. They said only "no cache entry
    matches '<fp>' in <datasets cache>", in human, JSON and quiet output alike."""
    there = json.loads(_ok(cachetool(pipeline, "ls", "--json", "--cache-dir", str(pipeline.saved))))
    (fp,) = [e["fingerprint"] for e in there["entries"] if e["kind"] == "shards"]
    prefix = fp[:8]
    command = f"`cachetool show {prefix} --cache-dir {pipeline.saved}`"
    for fmt in ((), ("--json",), ("-q",)):
        failed = cachetool(pipeline, "show", prefix, *fmt)
        assert failed.returncode == 2 and failed.stdout == "", (failed.stdout, failed.stderr)
        (line,) = failed.stderr.splitlines()
        assert line.startswith(f"Error: no cache entry matches '{prefix}' in {pipeline.cache}"), line
        assert f"; {pipeline.saved}, a cache root of its own, records it: {command}" in line, line
    shown = json.loads(_ok(cachetool(pipeline, "show", prefix, "--json", "--cache-dir", str(pipeline.saved))))
    assert shown["fingerprint"] == fp
    # `pin` names it alike, and pins it there.
    failed = cachetool(pipeline, "pin", prefix)
    assert failed.returncode == 2, failed.stderr
    assert f"records it: `cachetool pin {prefix} --cache-dir {pipeline.saved}`" in failed.stderr
    _ok(cachetool(pipeline, "pin", prefix, "--cache-dir", str(pipeline.saved)))
    _ok(cachetool(pipeline, "unpin", prefix, "--cache-dir", str(pipeline.saved)))
    # A name no root knows still gets the plain message; so does the empty name, which every
    # fingerprint starts with (it named every root a traced run wrote in).
    for name in ("0123abcd", ""):
        unknown = cachetool(pipeline, "show", name)
        assert unknown.returncode == 2
        assert unknown.stderr == f"Error: no cache entry matches '{name}' in {pipeline.cache}\n"


@pytest.mark.slow
def test_dirs_lists_the_other_roots_traced_runs_wrote_in(pipeline: Pipeline) -> None:
    """`dirs` names the saved folder the pipeline's map after `load_from_disk` wrote in, a cache
    root of its own, after the locations of the datasets cache (it named none: a user found the
    second root only in `lineage`'s notes); `dirs -q` still starts with the datasets cache."""
    doc = json.loads(_ok(cachetool(pipeline, "dirs", "--json")))
    names = [(loc["name"], loc["path"], loc["source"], loc["exists"]) for loc in doc["locations"]]
    assert names[0][:2] == ("datasets cache", str(pipeline.cache))
    assert ("saved folder", str(pipeline.saved), "registry", True) in names, names
    assert names.index(("saved folder", str(pipeline.saved), "registry", True)) > 8
    human = _ok(cachetool(pipeline, "dirs", columns=120))
    (row,) = [line for line in human.splitlines() if line.startswith("saved folder ")]
    assert str(pipeline.saved) in row and "registry" in row, human
    assert _ok(cachetool(pipeline, "dirs", "-q")).splitlines()[0] == str(pipeline.cache)


@pytest.mark.slow
def test_check_determinism_of_a_deterministic_pipeline_warns_of_nothing(pipeline: Pipeline) -> None:
    """The pipeline is deterministic: `check-determinism` says so and warns of nothing. (Its cold
    first run made internal `select` and `set_format` calls that the warm second run skips, and it
    warned "14 event(s) happened in some runs only (the runs took different paths)".)"""
    proc = cachetool(pipeline, "check-determinism", "pipeline.py", str(pipeline.base / "saved-check"))
    out = _ok(proc)
    assert "deterministic" in out and "not deterministic" not in out, out
    assert "some runs only" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_report_and_stats_count_steps_alike(pipeline: Pipeline) -> None:
    """`report` and `stats` do not give two numbers the same name: the report counts the
    fingerprints of its lineage graph (it called them "recorded step(s)", while `stats` said
    "Steps recorded" of a larger number: every record of every run)."""
    stats = json.loads(_ok(cachetool(pipeline, "stats", "--json")))
    out = _ok(cachetool(pipeline, "report", "-o", str(pipeline.base / "r.html")))
    said = re.search(r"(\d+) recorded step", out)
    assert said is None or int(said.group(1)) == stats["steps"], (out, stats["steps"])
    assert "recorded step" not in (pipeline.base / "r.html").read_text(encoding="utf-8")


SMALL = textwrap.dedent(
    """\
    import os

    from datasets import load_dataset


    def lower(ex):
        return {"low": ex["text"].lower()}


    here = os.path.dirname(os.path.abspath(__file__))
    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    print(ds.map(lower)._fingerprint)
    """
)


@pytest.mark.slow
def test_explain_names_the_gc_that_removed_a_recomputed_file(tmp_path: Path) -> None:
    """`explain --last` said the file of a step computed again "was gone (deleted, cleaned up, or
    load_from_cache_file=False)" when `cachetool gc` had removed it and recorded so: it names the
    gc and when it ran."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "data.csv").write_text("text\n" + "Word\n" * 50, encoding="utf-8")
    (project / "small.py").write_text(SMALL, encoding="utf-8")
    p = Pipeline(tmp_path, hf_env(tmp_path), tmp_path / "cache", tmp_path / "saved")
    first = cachetool(p, "run", "small.py")
    assert first.returncode == 0, first.stderr[-2000:]
    fp = first.stdout.split()[-1]
    _ok(cachetool(p, "gc", fp, "--min-age", "0", "--yes"))
    assert cachetool(p, "run", "small.py").returncode == 0
    doc = json.loads(_ok(cachetool(p, "explain", "--last", "--json")))
    (step,) = [s for s in doc["steps"] if s["fingerprint"] == fp]
    (reason,) = step["reasons"]
    assert reason["kind"] == "same-fingerprint" and "removed by cachetool gc at" in reason["message"], reason


@pytest.mark.slow
def test_explain_last_points_to_the_saved_folder_the_run_also_wrote(pipeline: Pipeline) -> None:
    """The map after `load_from_disk` is recorded in the saved folder, a cache root of its own:
    `explain --last` of the datasets cache says so with the command that explains it there (it
    did not mention it: a user counted one step fewer than the run made)."""
    again = cachetool(pipeline, "run", "pipeline.py", str(pipeline.saved))  # the latest run
    assert again.returncode == 0, again.stderr[-2000:]
    proc = cachetool(pipeline, "explain", "--last")
    _ok(proc)
    command = f"`cachetool explain --last --cache-dir {pipeline.saved}`"
    assert command in proc.stderr, proc.stderr
    there = _ok(cachetool(pipeline, "explain", "--last", "--json", "--cache-dir", str(pipeline.saved)))
    mine = json.loads(_ok(cachetool(pipeline, "explain", "--last", "--json")))["run"]
    assert json.loads(there)["run"] == mine
