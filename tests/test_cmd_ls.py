"""`cachetool ls`, `show` and `dirs` as a user runs them: exit codes, JSON, exact error lines."""

from __future__ import annotations

import json
import os
import sys
import time
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


def test_an_age_filter_without_a_unit_is_refused_as_gc_refuses_it(tmp_path: Path) -> None:
    """`ls --filter "used>30"` is refused with the hint `gc --older-than 30` gives (it silently
    meant 30 seconds, so `gc $(cachetool ls -q --filter "used>30")` evicted nearly everything);
    0 needs no unit."""
    for expr in ("used>30", "accessed>=7", "modified<2"):
        result = invoke("ls", str(tmp_path), "--filter", expr)
        assert result.exit_code == 2 and "needs a unit" in result.stderr, (expr, result.stderr)
        assert result.stderr.startswith(f"Error: invalid --filter '{expr}'"), result.stderr
    assert invoke("ls", str(tmp_path), "--filter", "used>0").exit_code == 0


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


@pytest.mark.slow
def test_names_of_locks_use_the_room_a_wide_terminal_gives(golden: dict[str, Any]) -> None:
    """A lock has no fingerprint: its row shows its file name, cut to 16 characters only when
    the terminal is narrow. At 200 columns the builder lock's name shows whole."""
    env = golden["env"]
    wide = invoke("ls", golden["cache"], env=env, columns=200).stdout
    narrow = invoke("ls", golden["cache"], env=env, columns=80).stdout
    builder_lock = next(Path(golden["cache"]).rglob("*_builder.lock")).name
    assert builder_lock in wide and max(len(line) for line in wide.splitlines()) <= 200
    assert builder_lock not in narrow and "…_builder.lock" in narrow
    assert max(len(line) for line in narrow.splitlines()) <= 80


@pytest.mark.slow
@pytest.mark.parametrize("sort", [[], ["--sort", "size"]])
def test_no_truncate_shows_every_fingerprint_and_name_whole_at_80_columns(
    golden: dict[str, Any], sort: list[str]
) -> None:
    """`ls --no-truncate` at 80 columns (a pipe, a narrow terminal) shows every id `ls -q`
    prints, fingerprints and lock names, whole on one line however wide the table grows (they
    were folded into pieces of three to six characters)."""
    env = golden["env"]
    ids = invoke("ls", golden["cache"], "-q", env=env).stdout.split()
    out = invoke("ls", golden["cache"], "--no-truncate", *sort, env=env, columns=80).stdout
    missing = [i for i in ids if os.path.basename(i) not in out]
    assert ids and not missing, (missing, out)


@pytest.mark.slow
def test_a_subfolder_or_a_saved_folder_is_read_with_its_roots_records(golden: dict[str, Any]) -> None:
    """`ls` of a dataset's folder inside a traced cache shows the operations and parents the
    cache's ledger recorded; `show` and `lineage` of a saved folder's path need no `--cache-dir`
    (even when the default cache does not exist) and follow the saved dataset to its source."""
    env = {**golden["env"], "HF_DATASETS_CACHE": str(golden["base"] / "no-such-cache")}
    sub = Path(golden["cache"]) / "csv"
    doc = json.loads(invoke("ls", str(sub), "--json", env=env).stdout)
    ops = {e["operation"] for e in doc["entries"] if e["fingerprint"]}
    assert {"load_dataset", "map", "filter", "shuffle"} <= ops
    saved = golden["folder"] / "saved" / "reviews"
    shown = invoke("show", str(saved), "--json", env=env)
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["kind"] == "saved"
    chain = invoke("lineage", str(saved), "--json", env=env)
    assert chain.exit_code == 0, chain.stderr
    steps = json.loads(chain.stdout)["steps"]
    assert steps[0]["operation"] == "load_dataset" and len(steps) == 6


def test_a_folder_without_datasets_files_is_listed_with_a_hint(tmp_path: Path) -> None:
    """A folder of CSV files is not a datasets cache: `ls` lists it and says so on stderr."""
    (tmp_path / "train.csv").write_text("id,text\n1,a\n")
    result = invoke("ls", str(tmp_path))
    assert result.exit_code == 0 and "train.csv" in result.stdout
    assert "it is not a datasets cache" in result.stderr and "cachetool dirs" in result.stderr


CAST_PIPELINE = """
import datasets
from datasets import ClassLabel

ds = datasets.load_dataset("csv", data_files="data.csv", split="train")
ds = ds.cast_column("label", ClassLabel(names=["neg", "pos"]))
ds = ds.map(lambda x: {"n": len(x["text"])})
print(ds._fingerprint)
"""


@pytest.mark.slow
def test_the_file_a_cast_writes_lists_as_the_cast(tmp_path: Path) -> None:
    """`cast_column` writes its file under the fingerprint of the `map` it runs inside: `ls`
    gives that file the cast's operation and parent, the cast's own fingerprint as an alias (so
    the next step's parent matches a row), and its last use from a run that loaded it."""
    from tests.conftest import cachetool_run, hf_env

    (tmp_path / "data.csv").write_text("text,label\na,pos\nb,neg\nc,pos\n")
    (tmp_path / "pipe.py").write_text(CAST_PIPELINE)
    env = hf_env(tmp_path)
    cachetool_run("pipe.py", env=env, cwd=tmp_path, warm=True)
    time.sleep(1.01 - time.time() % 1)  # times are listed to the second: the next one
    cachetool_run("pipe.py", env=env, cwd=tmp_path, warm=True)
    entries = json.loads(invoke("ls", env["HF_DATASETS_CACHE"], "--json", env=env).stdout)["entries"]
    by_fp = {e["fingerprint"]: e for e in entries if e["fingerprint"]}
    source = next(e for e in entries if e["kind"] == "source")
    mapped = next(e for e in by_fp.values() if e["operation"] == "map")
    cast = next(e for e in by_fp.values() if e["operation"] == "cast_column")
    assert cast["parent"] == source["fingerprint"]
    assert mapped["parent"] in cast["aliases"]
    assert cast["used"] > cast["modified"]  # the second run loaded it


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
    doc = json.loads(said.stdout)
    assert [r["path"] for r in doc["result"]["removed"]] == [str(pymp)], doc["plan"]
    assert not pymp.exists() and not default.exists()


@pytest.mark.slow
def test_list_cache_from_python_knows_what_the_ledger_recorded_as_ls_does(golden: dict[str, Any]) -> None:
    """`from cachetool import list_cache` is the function behind `cachetool ls`: on a cache its
    pipeline was recorded in, each entry has the parent, operation and last use `ls --json` shows
    (so `filter=["used>30d"]` means what `--filter "used>30d"` means)."""
    from cachetool import list_cache

    doc = json.loads(invoke("ls", golden["cache"], "--json").stdout)
    shown = {e["id"]: (e["parent"], e["operation"], e["used"]) for e in doc["entries"]}
    listed = {e.id: (e.parent, e.operation, e.to_json()["used"]) for e in list_cache(golden["cache"]).entries}
    assert listed == shown and any(parent for parent, _, _ in shown.values())


@pytest.mark.slow
def test_nothing_cached_yet_names_the_cache_dir_the_last_traced_run_wrote_in(tmp_path: Path) -> None:
    """A pipeline caches only under `load_dataset(..., cache_dir=<project>/hfc)`, so the default
    cache root does not exist: `ls` and `stats` say nothing is cached there and name the folder
    the traced run wrote in with the command the user ran and `--cache-dir` (`stats` named `ls`),
    and that `ls` lists the run's entries. They only said "nothing cached yet". `lineage FP` and
    `show FP` give themselves with `--cache-dir` (they gave `ls`), and that command works."""
    from tests.conftest import cachetool_run
    from tests.lineage_pipeline import subprocess_env

    (tmp_path / "d.csv").write_text("x\n1\n2\n", encoding="utf-8")
    (tmp_path / "p.py").write_text(
        "from datasets import load_dataset\n"
        "load_dataset('csv', data_files='d.csv', split='train', cache_dir='hfc').map(lambda e: {'y': 1})\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"), COLUMNS="80")
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    other = str(tmp_path / "hfc")
    for args in (["ls"], ["stats"]):
        said = forks.run(
            [sys.executable, "-m", "cachetool", *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert "othing cached yet" in said.stdout + said.stderr, said
        assert f"the last traced run recorded steps in {other}" in " ".join(said.stderr.split()), said
        assert f"`cachetool {args[0]} --cache-dir {other}`" in said.stderr, said.stderr
    listed = forks.run(
        [sys.executable, "-m", "cachetool", "ls", "--cache-dir", other, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    (fp,) = [e["fingerprint"] for e in json.loads(listed.stdout)["entries"] if e["operation"] == "map"]
    # `lineage FP` and `show FP` name themselves with --cache-dir (they named `ls`), and it runs.
    for args in (["lineage", fp[:8]], ["show", fp[:8]]):
        said = forks.run(
            [sys.executable, "-m", "cachetool", *args], env=env, capture_output=True, text=True, timeout=120
        )
        command = f"cachetool {' '.join(args)} --cache-dir {other}"
        assert f"`{command}`" in said.stderr, said.stderr
        again = forks.run([sys.executable, "-m", *command.split()], env=env, capture_output=True, text=True)
        assert again.returncode == 0 and fp in again.stdout, again


@pytest.mark.slow
def test_an_empty_default_root_names_the_saved_folder_the_last_traced_run_wrote_in(tmp_path: Path) -> None:
    """A pipeline that saves with `save_to_disk`, loads it again and maps: its cache files are in
    the saved folder, and the default root holds only the ledger of the save. `ls` there says "No
    entries." and now names the folder the run wrote in, with the `ls --cache-dir` that lists it
    (only a root that did not exist got that hint)."""
    from tests.conftest import cachetool_run
    from tests.lineage_pipeline import subprocess_env

    (tmp_path / "p.py").write_text(
        "import datasets\n"
        "datasets.Dataset.from_dict({'x': [1, 2]}).save_to_disk('saved')\n"
        "datasets.load_from_disk('saved').map(lambda e: {'y': 1})\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"), COLUMNS="80")
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    said = forks.run([sys.executable, "-m", "cachetool", "ls"], env=env, capture_output=True, text=True)
    assert "No entries." in said.stdout, said
    command = f"cachetool ls --cache-dir {tmp_path / 'saved'}"
    assert said.stderr.startswith(f"Hint: the last traced run recorded steps in {tmp_path / 'saved'}"), said
    assert f"`{command}`" in said.stderr, said.stderr
    listed = forks.run([sys.executable, "-m", *command.split()], env=env, capture_output=True, text=True)
    assert " map " in listed.stdout, listed
