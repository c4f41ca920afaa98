"""`verify --deep` reads a large file on every core and remembers what `datasets` says of each
schema, with the same findings as reading each file batch by batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cachetool.maintenance.verify import deep, verify_cache
from cachetool.maintenance.verify.deep import VERDICTS_NAME, deep_check
from tests import test_cmd_verify as cmd_verify
from tests.conftest import hf_env

pytestmark = pytest.mark.slow

FP = "0123456789abcdef"


def _stream(path: Path, batches: list[pa.RecordBatch]) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, batches[0].schema) as w:
        for b in batches:
            w.write_batch(b)


def _bad_utf8(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its string column's first byte made an invalid UTF-8 lead byte."""
    col = batch.column(1)
    validity, offsets, data = col.buffers()
    raw = bytearray(data.to_pybytes())
    raw[0] = 0xFF
    bad = pa.Array.from_buffers(pa.string(), len(col), [validity, offsets, pa.py_buffer(bytes(raw))])
    return pa.RecordBatch.from_arrays([batch.column(0), bad], names=batch.schema.names)


def test_the_first_bad_batch_of_a_file_spread_over_every_core_is_the_one_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file validated in many groups at once (groups of a few batches here) names the first
    batch that does not validate, in stream order, as a batch-by-batch read does: batches 13 and
    17 are damaged and the finding is batch 13's; cut after them, it is still batch 13's; with
    nothing damaged, the cut (mid-batch) is the finding."""
    monkeypatch.setattr(deep, "GROUP_BYTES", 3000)
    table = pa.table({"i": list(range(2000)), "s": [f"row {i} " * 3 for i in range(2000)]})
    batches = table.to_batches(max_chunksize=100)
    damaged = [_bad_utf8(b) if n in (13, 17) else b for n, b in enumerate(batches)]
    path = tmp_path / f"cache-{FP}.arrow"
    _stream(path, damaged)
    whole = deep_check(path)
    assert whole.error is not None and whole.error.startswith("invalid data in batch 13: ")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 9 // 10])
    assert (deep_check(path).error or "").startswith("invalid data in batch 13: ")
    _stream(path, batches)
    assert deep_check(path).error is None
    path.write_bytes(path.read_bytes()[: len(data) * 9 // 10])
    cut = deep_check(path)
    assert cut.error is not None and not cut.error.startswith("invalid data")
    assert cut.checksum is not None  # every byte is hashed whatever the finding


VERIFY = """
import sys
from cachetool.maintenance.verify import verify_cache
report = verify_cache(sys.argv[1], deep=True)
print([f.problem for f in report.errors], "datasets" in sys.modules)
"""


def test_a_repeated_deep_verify_answers_from_the_stored_verdicts_without_importing_datasets(
    tmp_path: Path,
) -> None:
    """The second `verify --deep` of a cache with a file whose schema `datasets` refuses reports
    the same "datasets cannot load it" without importing `datasets`, and so does the first of
    another cache holding that schema; a verdict stored for another install of `datasets` or
    `pyarrow` is not used (datasets is asked again)."""
    from datasets import Dataset

    env = hf_env(tmp_path)
    root = tmp_path / "cache"
    root.mkdir(exist_ok=True)
    good = root / f"cache-{FP}.arrow"
    Dataset.from_dict({"text": ["a", "b"]}).map(lambda x: x, cache_file_name=str(good))
    data = good.read_bytes()
    at = data.index(b'{"info"')
    good.write_bytes(data[:at] + b'["info"' + data[at + 7 :])

    def run_on(folder: Path) -> str:
        cmd = [sys.executable, "-c", VERIFY, str(folder)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout

    def run() -> str:
        return run_on(root)

    first = run()
    assert "datasets cannot load it" in first and first.rstrip().endswith("True")
    second = run()
    assert second == first.replace("True", "False")
    from cachetool.cache.locations import derived_dir

    kept = derived_dir(root, env).parent.parent / VERDICTS_NAME  # type: ignore[union-attr]
    assert not (root / ".cachetool" / kept.name).exists()  # verify --deep writes nothing in the root
    other = tmp_path / "other"  # another cache with a file of the same schema: datasets not asked
    other.mkdir()
    (other / good.name).write_bytes(good.read_bytes())
    assert run_on(other) == second
    doc = json.loads(kept.read_text())
    kept.write_text(json.dumps({**doc, "install": "another"}))
    assert run() == first
    assert [f.problem.split(":")[0] for f in verify_cache(root, deep=True).errors] == [
        "datasets cannot load it"
    ]


def _bad_offsets(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its string column's offsets out of order (in range at both ends)."""
    col = batch.column(1)
    n = len(col)
    offsets = list(range(0, 4 * (n + 1), 4))
    offsets[1], offsets[2] = offsets[2], offsets[1]
    bad = pa.Array.from_buffers(
        pa.string(),
        n,
        [None, pa.py_buffer(pa.array(offsets, pa.int32()).buffers()[1]), pa.py_buffer(b"okok" * n)],
    )
    return pa.RecordBatch.from_arrays([batch.column(0), bad], names=batch.schema.names)


def test_groups_validated_whole_give_what_batch_by_batch_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each group of batches is validated in one call, and batch by batch only when it does not
    validate: on clean files, empty batches, a string that is not UTF-8, offsets out of order and
    a cut file, in groups of a few batches or of the whole file, every result (finding, checksum,
    size, identity) is the one the batch-by-batch validation gives."""
    table = pa.table({"i": list(range(2000)), "s": [f"row {i} é " * 3 for i in range(2000)]})
    batches = table.to_batches(max_chunksize=100)
    empty = batches[0].slice(0, 0)
    files = {
        "clean": [*batches[:5], empty, *batches[5:], empty],
        "utf8": [_bad_utf8(b) if n in (13, 17) else b for n, b in enumerate(batches)],
        "offsets": [_bad_offsets(b) if n == 9 else b for n, b in enumerate(batches)],
        "both": [
            _bad_utf8(b) if n == 15 else _bad_offsets(b) if n == 11 else b for n, b in enumerate(batches)
        ],
    }
    paths = []
    for name, content in files.items():
        path = tmp_path / f"cache-{name:0>16}.arrow"
        _stream(path, content)
        paths.append(path)
    cut = tmp_path / f"cache-{'cut':0>16}.arrow"
    data = paths[0].read_bytes()
    cut.write_bytes(data[: len(data) * 2 // 3])
    paths.append(cut)

    def results(whole: bool, group_bytes: int) -> list[deep.DeepResult]:
        monkeypatch.setattr(deep, "WHOLE_GROUPS", whole)
        monkeypatch.setattr(deep, "GROUP_BYTES", group_bytes)
        return deep.read_files(paths, 2)

    for group_bytes in (3000, 10**9):
        one_by_one = results(False, group_bytes)
        assert [r.error is None for r in one_by_one] == [True, False, False, False, False]
        assert results(True, group_bytes) == one_by_one
    assert (one_by_one[1].error or "").startswith("invalid data in batch 13: ")
    assert (one_by_one[2].error or "").startswith("invalid data in batch 9: ")
    assert (one_by_one[3].error or "").startswith("invalid data in batch 11: ")


def _flip(path: Path, marker: bytes, at: int, value: int) -> None:
    """One byte of `path` (after `marker`) set to `value`, size and mtime kept (bit rot)."""
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    data[data.index(marker) + at] = value
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _csv_train(root: Path, made: dict[str, Any]) -> Path:
    return Path(made["csv_dir"].replace(made["cache"], str(root))) / "csv-train.arrow"


def _damage_a(root: Path, made: dict[str, Any]) -> None:
    """A string rewritten as invalid UTF-8, a letter changed in place (only a checksum sees it),
    a file cut mid-body, a saved shard without its end-of-stream marker, an empty file."""
    cmd_verify.invalid_utf8(root, made)
    _flip(_csv_train(root, made), b"item number 150", 5, ord("j"))
    target = cmd_verify.find(root, f"cache-{made['shards']}_00000_of_00002.arrow")
    target.write_bytes(target.read_bytes()[: cmd_verify.mid_body(target.read_bytes())])
    cmd_verify.saved_data_truncated(root, made)
    cmd_verify.find(root, "json-train-00000-of-00002.arrow").write_bytes(b"")


def _damage_b(root: Path, made: dict[str, Any]) -> None:
    """Offsets out of order, a byte that is not UTF-8 written in place, a flipped byte in a batch's
    header, a shard cut between batches."""
    cmd_verify.bad_offsets(root, made)
    _flip(_csv_train(root, made), b"item number 150", 5, 0xFF)
    target = cmd_verify.find(root, "json-train-00000-of-00002.arrow")
    _flip(target, b"", cmd_verify._message_offsets(target.read_bytes())[1] + 20, 0x7F)
    target = root / "saved" / "items" / "data-00001-of-00002.arrow"
    target.write_bytes(target.read_bytes()[: cmd_verify.between_batches(target.read_bytes())])


@pytest.mark.parametrize("recorded", [False, True], ids=["unrecorded", "recorded"])
@pytest.mark.parametrize("damage", [_damage_a, _damage_b], ids=["a", "b"])
def test_skipped_checksums_and_trusted_files_give_the_findings_of_a_full_read(
    damage: Callable[[Path, dict[str, Any]], None],
    recorded: bool,
    real_cache: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deep verify computes a checksum only when one is stored to compare with (or `record`
    stores it), and does not validate again a file whose bytes hash to a checksum recorded after
    this pyarrow validated it. On a cache damaged in every way the deep read sees (before or after
    `--record`), its report is the one of reading, validating and hashing every file: each
    finding, its words, hint and file version, and the bytes checked; on one thread as on two."""
    root = cmd_verify.clean_copy(real_cache, tmp_path)
    if recorded:
        first = verify_cache(root, deep=True, record=True)
        assert first.errors == () and first.recorded > 10
        sums = json.loads((root / ".cachetool" / "checksums.json").read_text())["files"]
        assert {s["validated"] for s in sums.values()} == {deep.validator()}
    damage(root, real_cache)
    fast = verify_cache(root, deep=True)
    assert verify_cache(root, deep=True, jobs=1) == fast  # a changed file read again on the one thread
    monkeypatch.setattr(deep, "_want", lambda old, record: deep.EVERYTHING)
    full = verify_cache(root, deep=True)
    assert fast.errors, "the damage was found"
    assert [(f, f.identity) for f in fast.findings] == [(f, f.identity) for f in full.findings]
    assert fast == full
    if recorded:  # each damaged file is named, an invalid one for its data, not its checksum
        problems = [f.problem.split(":")[0] for f in fast.errors]
        assert any(p.startswith("bytes changed since checksum") for p in problems) == (damage is _damage_a)
        assert any(p.startswith("invalid data in batch") for p in problems)


def test_a_stored_checksum_that_is_not_an_object_is_ignored(tmp_path: Path) -> None:
    """A checksums file whose entry for a file is not an object (edited by hand) gives the
    findings of a cache without stored checksums, not a traceback."""
    root = tmp_path / "cache"
    root.mkdir()
    _stream(root / f"cache-{FP}.arrow", pa.table({"i": [1, 2], "s": ["a", "b"]}).to_batches())
    plain = verify_cache(root, deep=True)
    (root / ".cachetool").mkdir(exist_ok=True)
    (root / ".cachetool" / "checksums.json").write_text(
        json.dumps({"version": 1, "files": {f"cache-{FP}.arrow": "0123"}})
    )
    assert verify_cache(root, deep=True) == plain


def _invalid_utf8_file(root: Path) -> Path:
    """A cache file whose one string is not UTF-8 (pyarrow's full validation refuses it)."""
    offsets = pa.py_buffer(memoryview(bytes([0, 0, 0, 0, 1, 0, 0, 0])))
    bad = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff")])
    path = root / f"cache-{FP}.arrow"
    _stream(path, [pa.RecordBatch.from_arrays([bad], ["s"])])
    return path


@pytest.mark.parametrize("note", ["other pyarrow", "older checks", "none"])
def test_a_file_trusted_by_another_validator_is_validated_again(tmp_path: Path, note: str) -> None:
    """A checksum on record spares the validation only when the same pyarrow and the same checks
    validated those bytes: an invalid file whose true checksum is on record with another pyarrow,
    older checks, or no note at all is read in full and reported; with this validator's note it is
    trusted (the bytes are the ones it found valid)."""
    import xxhash

    root = tmp_path / "cache"
    root.mkdir()
    path = _invalid_utf8_file(root)
    entry: dict[str, Any] = {
        "size": path.stat().st_size,
        "mtime_ns": path.stat().st_mtime_ns,
        "xxh3": xxhash.xxh3_64(path.read_bytes()).hexdigest(),
        "time": 0,
    }
    current = deep.validator()
    if note == "other pyarrow":
        entry["validated"] = current.replace(f"pyarrow {pa.__version__}", "pyarrow 0.0")
    elif note == "older checks":
        entry["validated"] = current.replace(f"checks {deep.DEEP_CHECKS}", f"checks {deep.DEEP_CHECKS - 1}")
    assert note == "none" or entry["validated"] != current
    deep.save_checksums(root, {path.name: entry})
    report = verify_cache(root, deep=True)
    assert [f.problem.split(":")[0] for f in report.errors] == ["invalid data in batch 0"], report.errors
    deep.save_checksums(root, {path.name: {**entry, "validated": current}})
    assert verify_cache(root, deep=True).errors == ()


def test_a_file_written_while_it_was_recorded_is_not_trusted(tmp_path: Path) -> None:
    """`--record` notes that a file was validated only when the file is still the version it read:
    a write in place while it was read (here: as the read ends) could have had old bytes validated
    and new ones hashed. Its checksum is stored without the note, so the next deep verify
    validates it again."""
    root = tmp_path / "cache"
    root.mkdir()
    path = root / f"cache-{FP}.arrow"
    _stream(path, pa.table({"s": ["a", "b"]}).to_batches())
    written = []

    def write_in_place(done: int, total: int) -> None:
        if not written:
            with open(path, "r+b") as f:
                f.seek(-12, os.SEEK_END)
                f.write(f.read(4))
            written.append(done)

    verify_cache(root, deep=True, record=True, progress=write_in_place)
    assert written
    (entry,) = deep.load_checksums(root).values()
    assert "validated" not in entry and entry["xxh3"]
    untouched = tmp_path / "untouched"
    untouched.mkdir()
    _stream(untouched / f"cache-{FP}.arrow", pa.table({"s": ["a", "b"]}).to_batches())
    verify_cache(untouched, deep=True, record=True)
    (entry,) = deep.load_checksums(untouched).values()
    assert entry["validated"] == deep.validator()
