"""Damaged or hostile metadata files never crash or hang a command: each ends with a finding, a
warning or one `Error:` line."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import forks
from tests.attack.races import synthesize_cache
from tests.conftest import hf_env

pytestmark = pytest.mark.slow

COMMANDS = [["ls"], ["ls", "--json"], ["verify"], ["gc", "--temp", "--dry-run"], ["stats"]]


def _run_all(root: Path, env: dict[str, str]) -> list[tuple[list[str], int, str]]:
    out = []
    for cmd in COMMANDS:
        args = [sys.executable, "-m", "cachetool", *cmd]
        args += [str(root)] if cmd[0] == "ls" else ["--cache-dir", str(root)]
        proc = forks.run(args, env=env, capture_output=True, text=True, timeout=60)
        out.append((cmd, proc.returncode, proc.stderr))
    return out


def _assert_no_crash(results: list[tuple[list[str], int, str]]) -> None:
    for cmd, code, err in results:
        assert "Traceback" not in err, (cmd, err[-1500:])
        assert code in (0, 1, 2), (cmd, code, err[-500:])


@pytest.mark.parametrize(
    "lengths", [["x"], [None], "1e400", "deep"], ids=["string", "null", "huge-float", "deep-nesting"]
)
def test_damaged_dataset_info(tmp_path: Path, lengths: object) -> None:
    root = tmp_path / "cache"
    files = synthesize_cache(root, 2)
    info = files[0].parent / "dataset_info.json"
    if lengths == "deep":
        info.write_text("[" * 100_000 + "]" * 100_000)
    elif lengths == "1e400":
        info.write_text(
            '{"splits": {"train": {"name": "train", "num_examples": 4, "shard_lengths": [1e400]}}}'
        )
    else:
        doc = {"splits": {"train": {"name": "train", "num_examples": 4, "shard_lengths": lengths}}}
        info.write_text(json.dumps(doc))
    _assert_no_crash(_run_all(root, hf_env(tmp_path)))


def test_damaged_state_and_dataset_dict(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    synthesize_cache(root, 1)
    saved = root / "saved"
    saved.mkdir()
    (saved / "data-00000-of-00001.arrow").write_bytes(b"")
    (saved / "state.json").write_text('{"_data_files": 5, "_fingerprint": "abc"}')
    dd = root / "dd"
    dd.mkdir()
    (dd / "dataset_dict.json").write_text("{" * 50_000)
    _assert_no_crash(_run_all(root, hf_env(tmp_path)))


def _index(root: Path, env: dict[str, str]) -> Path:
    """Where the listings of `root` under `env` keep the read index (the user's cache folder)."""
    from cachetool.cache.locations import derived_dir

    folder = derived_dir(root, env)
    assert folder is not None
    return folder / "read-index.z"


def _rewrite_index(index: Path, damage: Callable[[Any], Any]) -> None:
    """Change cachetool's read index in place (after its magic line a CRC, then a `marshal` of
    each folder's rows, themselves marshalled and zlib-compressed, and the prepared splits'
    fingerprints) with `damage`, which takes and gives a row; the CRC is made to match."""
    import marshal
    import zlib

    magic, _, data = index.read_bytes().partition(b"\n")
    folders, fingerprints = marshal.loads(data[4:])
    for folder, rows in folders.items():
        damaged = [damage(row) for row in marshal.loads(zlib.decompress(rows))]
        folders[folder] = zlib.compress(marshal.dumps(damaged))
    body = marshal.dumps((folders, fingerprints))
    index.write_bytes(magic + b"\n" + zlib.crc32(body).to_bytes(4, "big") + body)


@pytest.mark.parametrize(
    "damage",
    [lambda row: (*row[:4], row[4][:3]), lambda row: row[:2], lambda row: None],
    ids=["short-fields", "short-row", "not-a-row"],
)
def test_a_damaged_read_index_is_read_again(tmp_path: Path, damage: Callable[[Any], Any]) -> None:
    """A read index whose rows are cut short or are not rows: ls reads the files again and shows
    their real rows, never a traceback. (Only cachetool writes the index, in the user's cache
    folder; it is versioned and zlib-checked, so a row is not checked field by field.)"""
    root = tmp_path / "cache"
    synthesize_cache(root, 2)
    env = hf_env(tmp_path)
    ls = [sys.executable, "-m", "cachetool", "ls", str(root), "--json"]
    first = json.loads(forks.run(ls, env=env, capture_output=True, text=True, check=True).stdout)
    _rewrite_index(_index(root, env), damage)
    again = forks.run(ls, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "Traceback" not in again.stderr
    assert [e["rows"] for e in json.loads(again.stdout)["entries"]] == [e["rows"] for e in first["entries"]]


def test_garbage_in_place_of_the_read_index(tmp_path: Path) -> None:
    """Garbage in place of the read index is read past; the listing is the same."""
    root = tmp_path / "cache"
    synthesize_cache(root, 2)
    env = hf_env(tmp_path)
    ls = [sys.executable, "-m", "cachetool", "ls", str(root), "--json"]
    first = forks.run(ls, env=env, capture_output=True, text=True, check=True).stdout
    index = _index(root, env)
    index.write_bytes(b"\x78\x9c" + os.urandom(300))
    again = forks.run(ls, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and again.stderr == "" and again.stdout == first
    assert index.is_file()


@pytest.mark.parametrize("name", ["read-index.z", "pins.json"])
def test_a_fifo_in_place_of_cachetools_own_files_never_hangs(tmp_path: Path, name: str) -> None:
    root = tmp_path / "cache"
    synthesize_cache(root, 2)
    (root / ".cachetool").mkdir(exist_ok=True)
    fifo = _index(root, hf_env(tmp_path)) if name == "read-index.z" else root / ".cachetool" / name
    fifo.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(fifo)
    _assert_no_crash(_run_all(root, hf_env(tmp_path)))  # each command has 60 s: a hang fails


def test_damaged_ledger_records_fifo_and_dev_zero_segments(tmp_path: Path) -> None:
    """Ledger lines with wrong types (`"parents":5`, `"duration":"abc"`, `"files":5`,
    `"time":1e400`, a run summary counting `NaN` or `Infinity` records), 200,000 nested
    brackets, a FIFO segment and one symlinked to /dev/zero: every command that reads the ledger
    ends normally (the bad lines are warnings), none hangs."""
    root = tmp_path / "cache"
    files = synthesize_cache(root, 2)
    fp = files[0].name[len("cache-") : -len(".arrow")]
    good = {"v": 1, "type": "transform", "seq": 0, "time": 1.0, "result": fp, "parents": ["p" * 16]}
    bad = [
        {**good, "parents": 5},
        {**good, "duration": "abc"},
        {**good, "files": 5},
        {"v": 1, "type": "gc", "files": [1], "paths": "x"},
        {"v": 1, "type": "run-summary", "seq": 0, "time": 1.0, "fps": {fp: [1.0, float("nan"), 0, 0, 0]}},
        {"v": 1, "type": "run-summary", "seq": 0, "time": 1.0, "fps": {fp: [1.0, 1, float("inf"), 0, 0]}},
    ]
    lines = [json.dumps(good), *map(json.dumps, bad), json.dumps(good).replace("1.0", "1e400"), "[" * 200_000]
    ledger = root / ".cachetool" / "ledger"
    ledger.mkdir(parents=True)
    (ledger / "h-1-a.jsonl").write_text("\n".join(lines) + "\n")
    os.mkfifo(ledger / "h-2-b.jsonl")
    os.symlink("/dev/zero", ledger / "h-3-c.jsonl")
    env = hf_env(tmp_path)
    commands = [
        ["show", fp],
        ["lineage", fp],
        ["lineage", fp, "--json"],
        ["explain", fp],
        ["explain", "--last"],
        ["pin", fp],
        ["gc", "--older-than", "1s", "--dry-run"],
    ]
    results = _run_all(root, env)
    for cmd in commands:
        proc = forks.run(
            [sys.executable, "-m", "cachetool", *cmd, "--cache-dir", str(root)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        results.append((cmd, proc.returncode, proc.stderr))
    _assert_no_crash(results)
    lineage = next(err for cmd, _, err in results if cmd[:1] == ["lineage"])
    assert "not a regular file" in lineage and "'parents' is not a list of strings" in lineage
    assert f"'fps.{fp}' is not [last, records, hits, misses, random]" in lineage
