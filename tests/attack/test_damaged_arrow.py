"""A damaged Arrow file never crashes a command: it is an `unreadable` entry with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from cachetool.cache.arrow import UNREADABLE, read_summary
from cachetool.cache.index import ReadIndex, _encode
from tests.attack.damaged_arrow import damaged_folder, good_stream, mutations, non_utf8_name, wide_integer
from tests.conftest import hf_env, write_anew


def test_the_header_reader_survives_thousands_of_mutated_files(tmp_path: Path) -> None:
    """3,000 seeded mutants of a `datasets`-shaped Arrow stream (bytes set or flipped, half in the
    schema, some cut short) are each read to a summary with raw values, never an exception; the
    damage pyarrow raises on (ArrowNotImplementedError, ArrowKeyError, non-UTF-8 names) occurs
    among them, so the test exercises what crashed before."""
    path = tmp_path / "cache-0123456789abcdef.arrow"
    unreadable = 0
    for data in mutations(good_stream(), seed=20261124, count=3000):
        write_anew(path, data)
        s = read_summary(path)
        assert s.rows is None or isinstance(s.rows, int)
        assert all(isinstance(n, str) for n, _ in s.columns)
        assert s.error is None or isinstance(s.error, str)
        index = ReadIndex(tmp_path, enabled=False)
        index._open(zlib.decompress(_encode({"": [("f", 1, 2, 3, s)]})))
        assert index.get("f", 1, 2, 3) == s  # the index keeps it
        _ = s.features
        unreadable += s.format == UNREADABLE
    assert unreadable >= 20  # the mutants reach the exceptions beyond ArrowInvalid


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (wide_integer, "ArrowNotImplementedError: Integers with more than 64 bits not implemented"),
        (non_utf8_name, "a column name is not UTF-8"),
    ],
    ids=["wide-integer", "non-utf8-name"],
)
def test_damage_pyarrow_does_not_call_invalid_is_unreadable_with_the_reason(
    tmp_path: Path, damage: object, reason: str
) -> None:
    """A file whose schema names a 128-bit integer, or a column name that is not UTF-8, reads as
    `unreadable` with the reason pyarrow gave."""
    path = tmp_path / "cache-0123456789abcdef.arrow"
    assert callable(damage)
    path.write_bytes(damage(good_stream()))
    s = read_summary(path)
    assert (s.format, s.complete) == (UNREADABLE, False)
    assert s.error is not None and reason in s.error


COMMANDS = [
    ["ls", "{root}"],
    ["ls", "{root}", "--json"],
    ["show", "00000000000000a1", "--cache-dir", "{root}"],
    ["show", "00000000000000a2", "--cache-dir", "{root}"],
    ["verify", "--json", "--cache-dir", "{root}"],
    ["verify", "--deep", "--cache-dir", "{root}"],
    ["gc", "--cache-dir", "{root}", "--max-size", "1", "--dry-run"],
    ["gc", "--cache-dir", "{root}", "--temp", "--dry-run"],
    ["pin", "00000000000000a1", "--cache-dir", "{root}"],
    ["lineage", "00000000000000a1", "--cache-dir", "{root}"],
    ["lineage", "--cache-dir", "{root}"],
    ["stats", "--cache-dir", "{root}"],
]


@pytest.mark.slow
def test_every_command_over_a_folder_of_damaged_files_ends_cleanly(tmp_path: Path) -> None:
    """ls, show, verify (also --deep), gc, pin, lineage and stats over a folder of damaged Arrow
    files: no traceback, a documented exit code, and verify names each file as unreadable with
    its reason."""
    root = tmp_path / "cache"
    files = damaged_folder(root)
    env = hf_env(tmp_path)
    outputs = {}
    for cmd in COMMANDS:
        args = [a.format(root=root) for a in cmd]
        proc = subprocess.run(
            [sys.executable, "-m", "cachetool", *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])
        assert proc.returncode in (0, 1, 2), (args, proc.returncode, proc.stderr[-500:])
        outputs[" ".join(cmd[:2])] = proc
    verify = outputs["verify --json"]
    assert verify.returncode == 1
    found = {Path(f["path"]).name: f for f in json.loads(verify.stdout)["findings"]}
    assert {found[p.name]["kind"] for p in files.values()} == {"unreadable"}
    assert "Integers with more than 64 bits" in found[files["wide-integer"].name]["problem"]
    assert "not UTF-8" in found[files["non-utf8-name"].name]["problem"]
