"""`cachetool show` on a real cache: files, schema, completeness, exact error lines."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import forks
from tests.conftest import copy_cache, hf_env, invoke


@pytest.mark.slow
def test_show_by_prefix_prints_files_schema_and_completeness(real_cache: dict[str, Any]) -> None:
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


@pytest.mark.slow
def test_show_json_of_a_source_split_has_expected_rows_and_features(real_cache: dict[str, Any]) -> None:
    doc = json.loads(
        invoke("show", real_cache["csv_source"], "--cache-dir", real_cache["cache"], "--json").stdout
    )
    assert doc["kind"] == "source" and doc["expected_rows"] == 300 and doc["rows"] == 300
    assert doc["features"]["text"] == {"dtype": "large_string", "_type": "Value"}
    assert doc["files"][0]["complete"] is True and doc["files"][0]["fingerprint_in_file"] is None


@pytest.mark.slow
def test_show_ambiguous_and_unknown_are_usage_errors(real_cache: dict[str, Any]) -> None:
    result = invoke("show", "zzzz", "--cache-dir", real_cache["cache"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: no cache entry matches 'zzzz' in {real_cache['cache']}"
    amb = invoke("show", real_cache["mapped"], "--cache-dir", real_cache["cache"])
    assert amb.exit_code == 2
    assert amb.stderr.startswith(f"Error: '{real_cache['mapped']}' is ambiguous: it matches 2 entries")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("age", "unit", "listed", "shown"),
    [(5400, 3600, "{}h ago", "{} hour ago"), (50, 1, "{}s ago", "{} seconds ago")],
)
def test_ls_and_show_give_one_entry_the_same_age(
    real_cache: dict[str, Any], tmp_path: Path, age: int, unit: int, listed: str, shown: str
) -> None:
    """A file modified an hour and a half ago is `1h ago` in `ls` and `1 hour ago` in `show`
    (both round down; `show` said `2 hours ago`)."""
    cache = tmp_path / "cache"
    copy_cache(Path(real_cache["cache"]), cache)
    fp = real_cache["csv_source"]
    doc = json.loads(invoke("show", fp, "--cache-dir", str(cache), "--json").stdout)

    def aged(*args: str) -> tuple[str, set[int]]:
        """The output of `cachetool ARGS` run `age` seconds after the entry's files were
        modified, and the ages in `unit`s it may say: under load a command may read the clock
        seconds later (`50s` then reads 51 or 52), never earlier."""
        then = time.time() - age
        for f in doc["files"]:
            os.utime(f["path"], (then, then))
        out = invoke(*args).stdout
        late = time.time() - then
        return out, set(range(age // unit, int(late) // unit + 1))

    out, ages = aged("ls", str(cache))
    row = next(line for line in out.splitlines() if fp[:8] in line)
    assert any(listed.format(n) in row for n in ages), (row, ages)
    out, ages = aged("show", fp, "--cache-dir", str(cache))
    assert any(f"({shown.format(n)})" in out for n in ages), (out, ages)


def test_the_command_named_for_another_root_is_quoted_for_the_shell() -> None:
    """The command the message names for a root of its own is one a shell runs as printed: a
    path with a space is quoted (it was split into two arguments)."""
    import shlex

    from cachetool.errors import InAnotherRoot

    message = InAnotherRoot("ab12cd34", Path("/data/cache"), ["/data/work dir/my saved"], "show").message
    command = message.split("`")[1]
    assert shlex.split(command) == ["cachetool", "show", "ab12cd34", "--cache-dir", "/data/work dir/my saved"]


@pytest.mark.slow
def test_show_at_80_columns_keeps_fingerprints_times_and_call_sites_whole(golden: dict[str, Any]) -> None:
    """At 80 columns every line of `show` fits, and a record's time, parent fingerprint and call
    site each stay on one line, whole, so they can be copied."""
    env = golden["env"]
    doc = json.loads(invoke("ls", golden["cache"], "--json", env=env).stdout)
    last = next(e for e in doc["entries"] if e["kind"] == "shards")
    out = invoke("show", last["fingerprint"], "--cache-dir", golden["cache"], env=env, columns=80).stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    record = next(line for line in out.splitlines() if " map " in line and "miss" in line)
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d ", record), record
    assert last["parent"] in record and re.search(r"pipeline\.py:\d+$", record.rstrip()), record


@pytest.mark.slow
def test_show_takes_every_id_ls_q_prints_a_lock_and_a_temp_file_too(real_cache: dict[str, Any]) -> None:
    """`cachetool ls -q | xargs -n1 cachetool show`: an entry without a fingerprint (the locks
    `load_dataset` leaves, a killed writer's tmp file) is named by its path, and `show` of that
    path shows it (it said "no cache entry matches")."""
    listed = invoke("ls", "--json", "--filter", "kind=lock,temp", "--cache-dir", real_cache["cache"]).stdout
    entries = json.loads(listed)["entries"]
    assert {e["kind"] for e in entries} == {"lock", "temp"}, entries
    for i in (e["id"] for e in entries):
        result = invoke("show", i, "--cache-dir", real_cache["cache"], "--json")
        assert result.exit_code == 0, (i, result.stderr)
        assert json.loads(result.stdout)["path"] == i


@pytest.mark.slow
def test_show_of_a_damaged_file_says_only_verify_deep_reads_every_byte(tmp_path: Path) -> None:
    """A saved file with bytes overwritten in its middle: at 80 columns `show` says `ok` (it reads
    each file's schema and end-of-stream marker) and now hints that `cachetool verify --deep FP`
    reads every byte; that command finds the damage (exit 1). It said `ok` and nothing else."""
    env = hf_env(tmp_path)
    save = "import datasets as d;d.Dataset.from_dict({'t': [f'r{i}' for i in range(2000)]}).save_to_disk('s')"
    forks.run(
        [sys.executable, "-c", save], env=env, cwd=tmp_path, check=True, timeout=120, preload=forks.PIPELINE
    )
    (data,) = (tmp_path / "s").glob("*.arrow")
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 4 : len(raw) // 4 + 16] = b"\xff" * 16
    data.write_bytes(bytes(raw))
    (entry,) = json.loads(invoke("ls", str(tmp_path / "s"), "--json", env=env).stdout)["entries"]
    shown = invoke("show", entry["fingerprint"], "--cache-dir", str(tmp_path / "s"), env=env, columns=80)
    assert " ok " in " ".join(shown.stdout.split()), shown.stdout
    deep = f"cachetool verify --deep {entry['fingerprint']} --cache-dir {tmp_path / 's'}"
    assert f"only `{deep}` reads every byte" in shown.stderr, shown.stderr
    assert invoke(*deep.split()[1:], env=env).exit_code == 1
