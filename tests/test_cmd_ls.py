"""`cachetool ls`, `show` and `dirs` as a user runs them: exit codes, JSON, exact error lines."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import forks
from tests.conftest import invoke


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

    def test_list_cache_selects_what_ls_lists(self, real_cache: dict[str, Any]) -> None:
        """`list_cache(root, filter=, sort=, limit=)` from Python is `cachetool ls` with those
        options: the same entries in the same order; a bad expression fails before any scan."""
        from cachetool import list_cache
        from cachetool.errors import BadExpression

        options = ["--filter", "kind=indices", "--sort", "rows:desc", "--limit", "3"]
        listed = invoke("ls", real_cache["cache"], "-q", *options).stdout.split()
        listing = list_cache(real_cache["cache"], filter=["kind=indices"], sort="rows:desc", limit=3)
        assert [e.id for e in listing.entries] == listed and len(listed) == 3
        assert len(listing.report.entries) > len(listing.entries)
        with pytest.raises(BadExpression):
            list_cache("/nonexistent-root", filter=["size>>1"])

    def test_ls_on_a_saved_folder(self, real_cache: dict[str, Any]) -> None:
        saved = Path(real_cache["cache"]) / "saved" / "items"
        doc = json.loads(invoke("ls", str(saved), "--json").stdout)
        saved_entries = [e for e in doc["entries"] if e["kind"] == "saved"]
        assert [e["fingerprint"] for e in saved_entries] == [real_cache["saved_state_fp"]]
        assert saved_entries[0]["aliases"] == [real_cache["saved_loaded_fp"]]


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
    proc = forks.run(
        [sys.executable, "-m", "cachetool", "ls", str(tmp_path / "nope")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "CacheNotFound" in proc.stderr
    env.pop("CACHETOOL_DEBUG")
    proc = forks.run(
        [sys.executable, "-m", "cachetool", "ls", str(tmp_path / "nope")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_recorded_entries_show_op_and_parent_in_ls_and_records_in_show(golden: dict[str, Any]) -> None:
    env = golden["env"]
    doc = json.loads(invoke("ls", golden["cache"], "--json", env=env).stdout)
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
    human = invoke("ls", golden["cache"], env=env, columns=80).stdout
    assert "op" in human and "parent" in human and max(len(line) for line in human.splitlines()) <= 80
    shown = json.loads(
        invoke("show", chain[-1]["fingerprint"], "--cache-dir", golden["cache"], "--json", env=env).stdout
    )
    assert [r["operation"] for r in shown["records"]] == ["map"]
    assert shown["records"][0]["parents"] == [chain[-2]["fingerprint"]]
    assert shown["records"][0]["function"]["qualname"] == "upper"


def test_nothing_cached_yet_is_an_empty_listing_and_gc_temp_still_cleans_the_temp_dir(tmp_path: Path) -> None:
    """Before `datasets` cached anything, its default cache folder does not exist: `ls` says
    "Nothing cached yet" (exit 0; `--json` lists no entries), `stats` and `explain` say so in their
    one error line, and `gc --temp` still removes a dead pool's `pymp-*` folder from the temp dir,
    making nothing where the cache will be. They all said "cache directory not found"."""
    from tests.conftest import hf_env

    env: dict[str, str | None] = {**hf_env(tmp_path), "HF_DATASETS_CACHE": None}
    default = tmp_path / "hf_home" / "datasets"
    pymp = Path(str(env["TMPDIR"])) / "pymp-k2x9_3ab"
    pymp.mkdir(parents=True)

    said = invoke("ls", env=env, columns=200)
    assert said.exit_code == 0 and said.stdout.startswith(f"Nothing cached yet: {default} does not exist")
    doc = json.loads(invoke("ls", "--json", env=env).stdout)
    assert doc["entries"] == [] and doc["root"] == str(default), doc
    for command in (["stats"], ["explain", "--last"]):
        said = invoke(*command, env=env, columns=200)
        assert said.exit_code == 2 and said.stderr.startswith(f"Error: nothing cached yet: {default} "), (
            said.stderr
        )

    said = invoke("gc", "--temp", "--min-age", "0", "-y", "--json", env=env)
    assert said.exit_code == 0, said.stderr
    assert [r["path"] for r in json.loads(said.stdout)["result"]["removed"]] == [str(pymp)]
    assert not pymp.exists() and not default.exists()
