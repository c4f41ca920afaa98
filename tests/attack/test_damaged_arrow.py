"""A damaged Arrow file never crashes a command: it is an `unreadable` entry with the reason."""

from __future__ import annotations

import json
import marshal
import sys
from pathlib import Path

import pytest

from cachetool.cache.arrow import UNREADABLE, ArrowSummary, read_summary
from tests import forks
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
        kept = marshal.loads(marshal.dumps(s.fields()))  # as the read index stores it
        assert ArrowSummary(*kept) == s  # the index keeps it
        _ = s.features
        unreadable += s.format == UNREADABLE
    assert unreadable >= 20  # the mutants reach the exceptions beyond ArrowInvalid


@pytest.mark.slow
def test_a_mutant_reads_as_pyarrows_reader_reads_it(tmp_path: Path) -> None:
    """Seeded mutants of a `datasets`-shaped stream read to what pyarrow's reader says of them
    (rows, batches, columns, metadata, completeness, the damage it names): a batch header that
    pyarrow's flatbuffer verifier refuses is damage, never a complete file."""
    from tests.test_listing_fast_paths import _pyarrow_walk

    path = tmp_path / "cache-0123456789abcdef.arrow"
    for seed in range(3):
        for data in mutations(good_stream(), seed=seed, count=150):
            write_anew(path, data)
            assert read_summary(path) == _pyarrow_walk(path), (seed, data.hex())


def test_headers_remembered_from_good_files_never_change_what_a_mutant_reads(tmp_path: Path) -> None:
    """The header walk remembers the schema and batch headers of files it read (files of one
    dataset differ only in their fingerprint): a mutant read right after good files of the same
    shape (other fingerprints of the same length) reads exactly as it does with nothing
    remembered, whether the damage is in the schema, the metadata value or the batches."""
    from cachetool.cache import ipc

    good = tmp_path / "good.arrow"
    path = tmp_path / "cache-0123456789abcdef.arrow"
    remembered = 0
    for data in mutations(good_stream(), seed=20261125, count=400):
        path.write_bytes(data)
        ipc._SHAPES.clear()
        ipc._SCHEMA_MESSAGES.clear()
        fresh = read_summary(path)
        for fp in ("fedcba9876543210", "00000000000000ff"):
            good.write_bytes(good_stream(fp))
            read_summary(good)
        remembered += bool(ipc._SCHEMA_MESSAGES)
        assert read_summary(path) == fresh
    assert remembered == 400


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
        proc = forks.run(
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
