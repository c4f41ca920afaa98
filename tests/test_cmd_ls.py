"""`cachetool ls`, `show` and `dirs` as a user runs them: exit codes, JSON, exact error lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cachetool.cli.app import app

runner = CliRunner()


def invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "120", **(env or {})}, catch_exceptions=False)


@pytest.mark.slow
class TestOnRealCache:
    def test_ls_json_lists_every_entry_with_raw_values(self, real_cache: dict[str, Any]) -> None:
        result = invoke("ls", "--cache-dir", real_cache["cache"], "--json")
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["root"] == real_cache["cache"]
        kinds = {e["kind"] for e in doc["entries"]}
        assert kinds == {
            "source",
            "derived",
            "indices",
            "shards",
            "saved",
            "temp",
            "incomplete-prepare",
            "incomplete-save",
            "lock",
            "download",
            "extracted",
        }
        src = next(e for e in doc["entries"] if e["fingerprint"] == real_cache["csv_source"])
        assert src["rows"] == 300 and isinstance(src["size"], int) and src["modified"].endswith("+00:00")
        assert src["columns"] == ["id", "text", "label"] and src["kind"] == "source"
        assert doc["totals"]["lock"]["bytes"] == 0 and doc["totals"]["lock"]["files"] >= 6

    def test_ls_human_groups_by_dataset_and_prints_totals(self, real_cache: dict[str, Any]) -> None:
        result = invoke("ls", real_cache["cache"])
        assert result.exit_code == 0
        out = result.stdout
        assert "csv/default-" in out and "json/default-" in out
        assert real_cache["csv_source"] in out and "shards 1/2" in out
        assert "by kind:" in out and "incomplete-prepare" in out

    def test_filter_sort_limit_and_quiet_compose(self, real_cache: dict[str, Any]) -> None:
        result = invoke("ls", real_cache["cache"], "-q", "--filter", "kind=indices", "--sort", "rows:asc")
        assert result.exit_code == 0
        ids = result.stdout.split()
        assert ids[0] == real_cache["test"] and sorted(ids) == sorted(
            [real_cache["test"], real_cache["filtered"], real_cache["train"], real_cache["shuffled"]]
        )
        rows = [
            json.loads(
                invoke(
                    "ls", real_cache["cache"], "--json", "--filter", "kind=indices", "--sort", "rows:asc"
                ).stdout
            )["entries"][i]["rows"]
            for i in range(4)
        ]
        assert rows == sorted(rows) and rows[0] == 75
        limited = invoke(
            "ls",
            real_cache["cache"],
            "-q",
            "--filter",
            "rows>=200",
            "--filter",
            "kind=indices",
            "--limit",
            "1",
            "--sort",
            "rows",
        )
        assert limited.stdout.split() in ([real_cache["shuffled"]], [real_cache["filtered"]])
        leftovers = invoke("ls", real_cache["cache"], "--json", "--filter", "kind=leftover")
        assert {e["kind"] for e in json.loads(leftovers.stdout)["entries"]} == {
            "temp",
            "incomplete-prepare",
            "incomplete-save",
        }
        big = invoke("ls", real_cache["cache"], "-q", "--filter", "size>1GB")
        assert big.stdout == ""
        old = invoke("ls", real_cache["cache"], "-q", "--filter", "used>7d")
        assert old.stdout == ""
        fresh = invoke("ls", real_cache["cache"], "-q", "--filter", "modified<1h", "--filter", "dataset=json")
        assert len(fresh.stdout.split()) >= 1

    def test_ls_on_a_saved_folder(self, real_cache: dict[str, Any]) -> None:
        saved = Path(real_cache["cache"]) / "saved" / "items"
        doc = json.loads(invoke("ls", str(saved), "--json").stdout)
        saved_entries = [e for e in doc["entries"] if e["kind"] == "saved"]
        assert [e["fingerprint"] for e in saved_entries] == [real_cache["saved_state_fp"]]
        assert saved_entries[0]["aliases"] == [real_cache["saved_loaded_fp"]]

    def test_show_by_prefix_prints_files_schema_and_completeness(self, real_cache: dict[str, Any]) -> None:
        result = invoke("show", real_cache["shards"][:7], "--cache-dir", real_cache["cache"])
        assert result.exit_code == 0, result.output
        out = result.stdout
        assert real_cache["shards"] in out and "shards 2/2" in out
        # The file table names each file whole and says whether its recorded fingerprint matches it.
        row = next(line for line in out.splitlines() if f"{real_cache['shards']}_00001_of_00002" in line)
        assert row.split()[0] == f"cache-{real_cache['shards']}_00001_of_00002.arrow" and "matches" in row
        whole = invoke("show", real_cache["shards"][:7], "--cache-dir", real_cache["cache"], "--no-truncate")
        assert f"{real_cache['shards']}_00001_of_00002 (matches)" in whole.stdout
        assert "complete" in out and "Schema" in out and "large_string" in out

    def test_show_json_of_a_source_split_has_expected_rows_and_features(
        self, real_cache: dict[str, Any]
    ) -> None:
        doc = json.loads(
            invoke("show", real_cache["csv_source"], "--cache-dir", real_cache["cache"], "--json").stdout
        )
        assert doc["kind"] == "source" and doc["expected_rows"] == 300 and doc["rows"] == 300
        assert doc["features"]["text"] == {"dtype": "large_string", "_type": "Value"}
        assert doc["files"][0]["complete"] is True and doc["files"][0]["fingerprint_in_file"] is None

    def test_show_ambiguous_and_unknown_are_usage_errors(self, real_cache: dict[str, Any]) -> None:
        result = invoke("show", "zzzz", "--cache-dir", real_cache["cache"])
        assert result.exit_code == 2
        assert result.stderr.strip() == f"Error: no cache entry matches 'zzzz' in {real_cache['cache']}"
        amb = invoke("show", real_cache["mapped"], "--cache-dir", real_cache["cache"])
        assert amb.exit_code == 2
        assert amb.stderr.startswith(f"Error: '{real_cache['mapped']}' is ambiguous: it matches 2 entries")


def test_missing_cache_dir_is_one_error_line_with_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = invoke("ls", "--cache-dir", str(missing))
    assert result.exit_code == 2
    assert result.stderr == f"Error: cache directory not found: {missing}\n"
    assert result.stdout == ""


def test_bad_filter_is_a_usage_error_quoting_the_expression(tmp_path: Path) -> None:
    result = invoke("ls", str(tmp_path), "--filter", "size>lots")
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: invalid --filter 'size>lots': 'lots' is not a number"
    result = invoke("ls", str(tmp_path), "--filter", "colour=red")
    assert result.exit_code == 2 and "unknown key 'colour'" in result.stderr
    result = invoke("ls", str(tmp_path), "--sort", "weight")
    assert result.exit_code == 2 and "invalid --sort 'weight'" in result.stderr


def test_path_and_cache_dir_together_are_refused(tmp_path: Path) -> None:
    result = invoke("ls", str(tmp_path), "--cache-dir", str(tmp_path))
    assert (
        result.exit_code == 2 and result.stderr.strip() == "Error: give either PATH or --cache-dir, not both"
    )


def test_debug_variable_shows_the_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "CACHETOOL_DEBUG": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", "ls", str(tmp_path / "nope")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "CacheNotFound" in proc.stderr
    env.pop("CACHETOOL_DEBUG")
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", "ls", str(tmp_path / "nope")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


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


@pytest.fixture(scope="module")
def traced_demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`cachetool demo` as a user runs it: the pipeline runs traced, the lineage is printed."""
    from tests.conftest import hf_env

    base = tmp_path_factory.mktemp("demo")
    env = hf_env(base, COLUMNS="100")
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", "demo", str(base / "demo")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {"base": base, "env": env, "stdout": proc.stdout, "cache": str(base / "demo" / "cache")}


@pytest.mark.slow
def test_demo_lists_the_cache_and_ends_with_the_lineage(traced_demo: dict[str, Any]) -> None:
    out = traced_demo["stdout"]
    assert "shards 2/2" in out and "Lineage of " in out
    lineage = out.split("Lineage of ", 1)[1]
    assert [line.split(".", 1)[1].split()[0] for line in lineage.splitlines()[1:7]] == [
        "load_dataset",
        "map",
        "filter",
        "shuffle",
        "flatten_indices",
        "map",
    ]


@pytest.mark.slow
def test_recorded_entries_show_op_and_parent_in_ls_and_records_in_show(traced_demo: dict[str, Any]) -> None:
    env = traced_demo["env"]
    doc = json.loads(invoke("ls", traced_demo["cache"], "--json", env=env).stdout)
    by_fp = {e["fingerprint"]: e for e in doc["entries"] if e["fingerprint"]}
    source = next(e for e in doc["entries"] if e["kind"] == "source")
    chain = [source]
    while True:
        child = [e for e in by_fp.values() if e["parent"] == chain[-1]["fingerprint"]]
        if not child:
            break
        assert len(child) == 1
        chain.append(child[0])
    assert [e["operation"] for e in chain] == [
        "load_dataset",
        "map",
        "filter",
        "shuffle",
        "flatten_indices",
        "map",
    ]
    assert [e["kind"] for e in chain] == ["source", "derived", "indices", "indices", "derived", "shards"]
    human = invoke("ls", traced_demo["cache"], env={**env, "COLUMNS": "80"}).stdout
    assert "op" in human and "parent" in human and max(len(line) for line in human.splitlines()) <= 80
    shown = json.loads(
        invoke(
            "show", chain[-1]["fingerprint"], "--cache-dir", traced_demo["cache"], "--json", env=env
        ).stdout
    )
    assert [r["operation"] for r in shown["records"]] == ["map"]
    assert shown["records"][0]["parents"] == [chain[-2]["fingerprint"]]
    assert shown["records"][0]["function"]["qualname"] == "upper"


@pytest.mark.slow
def test_lineage_shows_a_step_gc_removed_as_deleted(tmp_path: Path) -> None:
    from cachetool.demo import write_demo_files
    from tests.conftest import hf_env

    env = hf_env(tmp_path)
    script = write_demo_files(tmp_path / "demo")
    run = subprocess.run(
        [sys.executable, "-m", "cachetool", "run", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    final = run.stdout.strip().splitlines()[-1]
    cache = env["HF_DATASETS_CACHE"]
    chain = json.loads(invoke("lineage", final, "--cache-dir", cache, "--json", env=env).stdout)["steps"]
    victim = next(s["fingerprint"] for s in chain if s["operation"] == "filter")
    gc = subprocess.run(
        [sys.executable, "-m", "cachetool", "gc", victim, "--cache-dir", cache, "--min-age", "0", "-y"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gc.returncode == 0, gc.stderr
    after = json.loads(invoke("lineage", final, "--cache-dir", cache, "--json", env=env).stdout)["steps"]
    step = next(s for s in after if s["fingerprint"] == victim)
    assert step["deleted"].startswith("deleted by gc ") and all(not f["exists"] for f in step["files"])
    human = invoke("lineage", final, "--cache-dir", cache, env={**env, "COLUMNS": "200"}).stdout
    line = next(x for x in human.splitlines() if victim in x)
    assert "deleted" in line
