"""`cachetool verify` on real caches: clean ones pass, each kind of damage is named precisely."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from cachetool.cache.layout import Kind
from cachetool.cache.scan import scan_cache
from cachetool.cli.app import app
from cachetool.maintenance.verify import verify_cache
from cachetool.maintenance.verify.findings import Severity, VerifyReport
from cachetool.maintenance.verify.quarantine import QuarantinePlan, restore
from tests import forks
from tests.conftest import as_another_user, cachetool_run, hf_env

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _state_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--quarantine` records its moves in the ledger, which notes the root in the user's state."""
    monkeypatch.setenv("CACHETOOL_HOME", str(tmp_path / "cachetool_home"))


def clean_copy(real_cache: dict[str, Any], dest: Path) -> Path:
    """A copy of the real cache without the damage the builder planted on purpose."""
    root = dest / "cache"
    shutil.copytree(real_cache["cache"], root, symlinks=True)
    report = scan_cache(root, use_index=False)
    for e in report.entries:
        planted = e.kind in (Kind.TEMP, Kind.INCOMPLETE_PREPARE, Kind.INCOMPLETE_SAVE) or (
            e.fingerprint == real_cache["partial_shards"]
        )
        if planted:
            for f in e.files:
                f.path.unlink()
            if e.path.is_dir():
                shutil.rmtree(e.path)
    for lock in root.glob("*generator*.lock"):
        lock.unlink()
    for lock in (root / "generator").rglob("*.lock"):
        lock.unlink()
    return root


def errors(report: VerifyReport) -> list[tuple[str, str]]:
    return sorted((f.path.name, f.problem) for f in report.errors)


def test_real_cache_of_every_kind_verifies_with_zero_errors(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    root = clean_copy(real_cache, tmp_path)
    report = verify_cache(root, deep=True)
    assert report.errors == () and report.warnings == ()
    kinds = {e.kind for e in scan_cache(root).entries}
    assert {
        Kind.SOURCE,
        Kind.DERIVED,
        Kind.INDICES,
        Kind.SHARDS,
        Kind.SAVED,
        Kind.DOWNLOAD,
        Kind.EXTRACTED,
        Kind.LOCK,
    } <= kinds
    assert report.bytes_checked > 100_000


def test_planted_leftovers_are_warnings_and_planted_damage_errors(real_cache: dict[str, Any]) -> None:
    report = verify_cache(real_cache["cache"])
    assert {(f.kind, f.problem) for f in report.errors} == {
        ("shards", "partial: 1 of 2 shards (missing 00001)"),
        ("incomplete-save", "data-*.arrow without state.json: an interrupted save_to_disk"),
    } or all(f.kind in ("shards", "incomplete-save") for f in report.errors)
    warned = {f.kind for f in report.warnings}
    assert {"temp", "incomplete-prepare"} <= warned
    assert all(
        f.hint.startswith(f"cachetool gc {f.path} --min-age 0 --cache-dir ")
        for f in report.warnings
        if f.kind in ("temp", "incomplete-prepare")
    )


# -- the corpus of damage --------------------------------------------------------------------------


def find(root: Path, pattern: str) -> Path:
    hits = sorted(root.rglob(pattern))
    assert hits, pattern
    return hits[0]


def cut(at: Callable[[bytes], int]) -> Callable[[Path, dict[str, Any]], Path]:
    def damage(root: Path, made: dict[str, Any]) -> Path:
        target = find(root, f"cache-{made['mapped']}.arrow")
        data = target.read_bytes()
        target.write_bytes(data[: at(data)])
        return target

    return damage


def _message_offsets(data: bytes) -> list[int]:
    """Start offsets of the IPC messages of a stream (continuation marker, length, body)."""
    offsets = []
    pos = 0
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(data))
    while True:
        offsets.append(pos)
        try:
            msg = reader.read_next_message()
        except StopIteration:
            break
        pos += len(msg.serialize())
    return offsets


def between_batches(data: bytes) -> int:
    return _message_offsets(data)[2]  # schema, batch 0 | cut | ...


def mid_body(data: bytes) -> int:
    offs = _message_offsets(data)
    return (offs[1] + offs[2]) // 2 + 40


def overwrite(name: str, content: bytes) -> Callable[[Path, dict[str, Any]], Path]:
    def damage(root: Path, made: dict[str, Any]) -> Path:
        target = find(root, f"cache-{made[name]}.arrow")
        target.write_bytes(content)
        return target

    return damage


def wrong_magic(root: Path, made: dict[str, Any]) -> Path:
    target = find(root, f"cache-{made['mapped']}.arrow")
    data = bytearray(target.read_bytes())
    data[0:4] = b"\x00\x11\x22\x33"
    target.write_bytes(bytes(data))
    return target


def ipc_file_format(root: Path, made: dict[str, Any]) -> Path:
    target = find(root, f"cache-{made['mapped']}.arrow")
    table = pa.ipc.open_stream(target.read_bytes()).read_all()
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return target


def rewrite(target: Path, table: pa.Table, batches: list[pa.RecordBatch] | None = None) -> None:
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        for b in batches or table.to_batches():
            w.write_batch(b)


def other_fingerprint(root: Path, made: dict[str, Any]) -> Path:
    target = find(root, f"cache-{made['mapped']}.arrow")
    table = pa.ipc.open_stream(target.read_bytes()).read_all()
    meta = json.loads(table.schema.metadata[b"huggingface"])
    meta["fingerprint"] = "ffffffffffffffff"
    rewrite(target, table.replace_schema_metadata({"huggingface": json.dumps(meta)}))
    return target


def missing_num_proc_shard(root: Path, made: dict[str, Any]) -> Path:
    target = find(root, f"cache-{made['shards']}_00001_of_00002.arrow")
    target.unlink()
    return find(root, f"cache-{made['shards']}_00000_of_00002.arrow")


def missing_source_shard(root: Path, made: dict[str, Any]) -> Path:
    target = find(root, "json-train-00001-of-00002.arrow")
    target.unlink()
    return find(root, "json-train-00000-of-00002.arrow")


def info_rows(root: Path, made: dict[str, Any]) -> Path:
    info = Path(made["csv_dir"].replace(made["cache"], str(root))) / "dataset_info.json"
    doc = json.loads(info.read_text())
    doc["splits"]["train"]["num_examples"] = 301
    info.write_text(json.dumps(doc))
    return info.parent / "csv-train.arrow"


def shard_lengths(root: Path, made: dict[str, Any]) -> Path:
    info = find(root, "json-train-00000-of-00002.arrow").parent / "dataset_info.json"
    doc = json.loads(info.read_text())
    doc["splits"]["train"]["shard_lengths"] = [50, 51]
    info.write_text(json.dumps(doc))
    return find(root, "json-train-00001-of-00002.arrow")


def state_names_missing(root: Path, made: dict[str, Any]) -> Path:
    target = root / "saved" / "items" / "data-00001-of-00002.arrow"
    target.unlink()
    return root / "saved" / "items"


def saved_data_truncated(root: Path, made: dict[str, Any]) -> Path:
    target = root / "saved" / "items" / "data-00000-of-00002.arrow"
    target.write_bytes(target.read_bytes()[:-8])
    return target


def indices_past_end(root: Path, made: dict[str, Any]) -> Path:
    target = find(root, f"cache-{made['filtered']}.arrow")
    table = pa.ipc.open_stream(target.read_bytes()).read_all()
    bad = pa.table({"indices": pa.array([0, 5, 100_000], type=pa.uint64())}).replace_schema_metadata(
        table.schema.metadata
    )
    rewrite(target, bad)
    return target


def symlink_loop(root: Path, made: dict[str, Any]) -> Path:
    target = Path(made["csv_dir"].replace(made["cache"], str(root))) / "cache-loop0000loop0000.arrow"
    target.symlink_to(target.name)
    return target


def stale_lock(root: Path, made: dict[str, Any]) -> Path:
    target = root / "csv" / "gone_builder.lock"
    target.write_bytes(b"")
    return target


def invalid_utf8(root: Path, made: dict[str, Any]) -> Path:
    target = find(root, f"cache-{made['mapped']}.arrow")
    table = pa.ipc.open_stream(target.read_bytes()).read_all()
    text = pa.Array.from_buffers(
        pa.large_string(),
        2,
        [None, pa.py_buffer(pa.array([0, 2, 4], type=pa.int64()).buffers()[1]), pa.py_buffer(b"ok\xff\xfe")],
    )
    cols = {name: table.column(name).combine_chunks()[:2] for name in table.column_names}
    cols["text"] = text
    rewrite(target, pa.table(cols).replace_schema_metadata(table.schema.metadata))
    return target


def bad_offsets(root: Path, made: dict[str, Any]) -> Path:
    target = find(root, f"cache-{made['mapped']}.arrow")
    table = pa.ipc.open_stream(target.read_bytes()).read_all()
    # Non-monotonic offsets pass pyarrow's cheap checks (first and last offset are in range).
    text = pa.Array.from_buffers(
        pa.large_string(),
        3,
        [None, pa.py_buffer(pa.array([0, 3, 1, 4], type=pa.int64()).buffers()[1]), pa.py_buffer(b"okok")],
    )
    cols = {name: table.column(name).combine_chunks()[:3] for name in table.column_names}
    cols["text"] = text
    rewrite(target, pa.table(cols).replace_schema_metadata(table.schema.metadata))
    return target


# (case id, damage, expected error problem (prefix), only with --deep)
CASES: list[tuple[str, Callable[[Path, dict[str, Any]], Path], str, bool]] = [
    ("cut-in-schema-prefix", cut(lambda d: 6), "unreadable schema:", False),
    ("cut-in-schema-body", cut(lambda d: 60), "unreadable schema:", False),
    (
        "cut-after-schema",
        cut(lambda d: _message_offsets(d)[1]),
        "no end-of-stream marker after 0 batches",
        False,
    ),
    ("cut-between-batches", cut(between_batches), "no end-of-stream marker after 1 batches", False),
    ("cut-mid-body", cut(mid_body), "truncated after 0 batches (0 rows):", False),
    ("cut-in-batch-header", cut(lambda d: _message_offsets(d)[1] + 12), "truncated after 0 batches", False),
    ("only-eos-missing", cut(lambda d: len(d) - 8), "no end-of-stream marker after", False),
    ("eos-half-missing", cut(lambda d: len(d) - 4), "truncated after", False),
    ("zero-length", overwrite("mapped", b""), "empty file (0 bytes)", False),
    ("random-bytes", overwrite("mapped", os.urandom(4096)), "not an Arrow IPC stream", False),
    ("wrong-magic", wrong_magic, "not an Arrow IPC stream (starts with 00112233", False),
    (
        "ipc-file-format",
        ipc_file_format,
        "Arrow IPC file format, but datasets reads the stream format",
        False,
    ),
    ("fingerprint-differs", other_fingerprint, "file holds fingerprint ffffffffffffffff, name says", False),
    ("missing-source-shard", missing_source_shard, "missing shards 00001 of 2", False),
    ("rows-differ-from-info", info_rows, "300 rows, dataset_info.json says 301", False),
    ("shard-lengths-differ", shard_lengths, "50 rows, dataset_info.json shard_lengths says 51", False),
    (
        "state-names-missing-file",
        state_names_missing,
        "state.json names data-00001-of-00002.arrow, which is missing",
        False,
    ),
    ("saved-file-truncated", saved_data_truncated, "no end-of-stream marker after", False),
    ("indices-past-end", indices_past_end, "index 100000 points past the end", False),
    ("invalid-utf8", invalid_utf8, "invalid data in batch 0:", True),
    ("out-of-range-offsets", bad_offsets, "invalid data in batch 0:", True),
]


def test_a_num_proc_shard_set_missing_a_shard_is_a_warning_and_never_quarantined(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    """A num_proc shard set that misses a shard is what a killed map leaves: datasets loads the
    finished shard and computes the missing one, so it is a warning (it was an error that
    `--quarantine` fixed by moving the finished shard aside)."""
    root = clean_copy(real_cache, tmp_path)
    kept = missing_num_proc_shard(root, real_cache)
    report = verify_cache(root)
    assert report.errors == (), errors(report)
    (partial,) = [f for f in report.warnings if f.code == "partial-shards"]
    assert partial.path == kept and partial.problem.startswith("partial: 1 of 2 shards (missing 00001): ")
    assert verify_cache(root, quarantine=True).quarantined == () and kept.exists()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_damage_is_found_with_its_precise_message(
    case: Any, real_cache: dict[str, Any], tmp_path: Path
) -> None:
    _, damage, expected, deep_only = case
    root = clean_copy(real_cache, tmp_path)
    target = damage(root, real_cache)
    report = verify_cache(root)
    hits = [f for f in report.errors if f.problem.startswith(expected) or expected in f.problem]
    if deep_only:
        assert hits == [], "found without --deep: the header walk should not see this"
        report = verify_cache(root, deep=True)
        hits = [f for f in report.errors if f.problem.startswith(expected)]
    assert len(hits) == 1, errors(report)
    assert hits[0].path == target
    assert len(report.errors) == 1, errors(report)


@pytest.mark.parametrize(
    "damage,problem",
    [
        (symlink_loop, "symlink to cache-loop0000loop0000.arrow"),
        (stale_lock, "stale lock: gone no longer exists"),
    ],
)
def test_odd_things_are_warnings(
    damage: Any, problem: str, real_cache: dict[str, Any], tmp_path: Path
) -> None:
    root = clean_copy(real_cache, tmp_path)
    target = damage(root, real_cache)
    report = verify_cache(root)
    assert report.errors == ()
    assert [(f.path, f.problem.split(" (")[0]) for f in report.warnings] == [(target, problem)]


def test_fifo_in_the_cache_does_not_hang(real_cache: dict[str, Any], tmp_path: Path) -> None:
    root = clean_copy(real_cache, tmp_path)
    os.mkfifo(root / "csv" / "cache-fifo000fifo0000.arrow")
    proc = forks.run(
        [sys.executable, "-m", "cachetool", "verify", "--cache-dir", str(root), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0
    assert [f["problem"] for f in doc["findings"]] == ["not a regular file (FIFO)"]


def test_permission_denied_file_is_an_error(real_cache: dict[str, Any], tmp_path: Path) -> None:
    root = clean_copy(real_cache, tmp_path)
    target = find(root, f"cache-{real_cache['mapped']}.arrow")
    os.chmod(target, 0)
    if os.geteuid() != 0:
        assert [(f.path, f.problem) for f in verify_cache(root).errors] == [(target, "permission denied")]
        return
    # As root the kernel lets everything through: verify as an unprivileged user in a child.
    p = tmp_path
    while p != p.parent:
        os.chmod(p, os.stat(p).st_mode | 0o005)
        p = p.parent
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o755)
    verify_cache(root)  # imports what the child needs (the interpreter's files are root's)
    got = as_another_user(lambda: [[str(f.path), f.problem] for f in verify_cache(root).errors])
    assert got == [[str(target), "permission denied"]]


def test_a_changed_byte_after_record_is_reported(real_cache: dict[str, Any], tmp_path: Path) -> None:
    root = clean_copy(real_cache, tmp_path)
    first = verify_cache(root, deep=True, record=True)
    assert first.errors == () and first.recorded > 10
    target = Path(real_cache["csv_dir"].replace(real_cache["cache"], str(root))) / "csv-train.arrow"
    st = os.stat(target)
    data = bytearray(target.read_bytes())
    data[data.index(b"item number 150") + 5] ^= 0x01  # one flipped bit in a string value, headers intact
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert verify_cache(root).errors == ()  # the headers cannot see it
    report = verify_cache(root, deep=True)
    assert [(f.path, f.problem.split(" recorded")[0]) for f in report.errors] == [
        (target, "bytes changed since checksum")
    ]
    assert "same size and mtime" in report.errors[0].problem


def _in_place(path: Path, edit: Callable[[bytearray], object]) -> None:
    """Edit the file's bytes and give it back its mtime (bit rot, a silent overwrite)."""
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    edit(data)
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_deep_verify_after_a_recorded_one_finds_each_damage_done_since(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    """After `verify --deep --record` (read index and checksums stored), one file gets a letter
    of a string changed into another (only the checksum can tell), one a string byte that is not
    UTF-8, both keeping size and mtime, and one is cut short. `cachetool verify --deep` names
    each of the three once, and nothing else, and exits 1."""
    root = clean_copy(real_cache, tmp_path)

    def deep(*extra: str) -> tuple[int, dict[str, Any]]:
        cmd = [sys.executable, "-m", "cachetool", "verify", "--deep", "--json", "--cache-dir", str(root)]
        proc = forks.run([*cmd, *extra], env=hf_env(tmp_path), capture_output=True, text=True, timeout=300)
        return proc.returncode, json.loads(proc.stdout)

    code, doc = deep("--record")
    assert code == 0 and doc["checksums_recorded"] > 10
    letter = Path(real_cache["csv_dir"].replace(real_cache["cache"], str(root))) / "csv-train.arrow"
    _in_place(letter, lambda d: d.__setitem__(d.index(b"item number 150") + 5, ord("j")))
    not_utf8 = find(root, f"cache-{real_cache['mapped']}.arrow")
    _in_place(not_utf8, lambda d: d.__setitem__(d.index(b"item number 7") + 2, 0xFF))
    cut_short = find(root, "json-train-00000-of-00002.arrow")
    cut_short.write_bytes(cut_short.read_bytes()[:-100])
    code, doc = deep()
    found = sorted((f["path"], f["problem"].split(":")[0].split(" recorded")[0]) for f in doc["findings"])
    assert code == 1
    assert found == sorted(
        [
            (str(letter), "bytes changed since checksum"),
            (str(not_utf8), "invalid data in batch 0"),
            (str(cut_short), "truncated after 0 batches (0 rows)"),
        ]
    ), doc["findings"]


KILL_SAVE = """
import sys
from datasets import Dataset
ds = Dataset.from_dict({"text": ["x" * 2000] * 20000})
ds.save_to_disk(sys.argv[1], num_shards=200)
"""


def test_save_to_disk_killed_midway(tmp_path: Path) -> None:
    """A real SIGKILL during save_to_disk: a warning while it might still be running, an error
    once it is old; gc is the hint."""
    env = hf_env(tmp_path)
    target = tmp_path / "cache" / "saved" / "big"
    # Forked warm where it can (a save's files do not depend on the hash seed); as real a SIGKILL.
    cmd = [sys.executable, "-c", KILL_SAVE, str(target)]
    proc: forks.ForkedProcess | subprocess.Popen[bytes] = (
        forks.ForkedProcess(cmd, env=env, preload=forks.PIPELINE)
        if forks.available()
        else subprocess.Popen(cmd, env=env)
    )
    deadline = time.time() + 60
    while time.time() < deadline and not list(target.glob("data-0000[3-9]-of-*.arrow")):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (target / "state.json").exists(), "the save finished before it could be killed"
    root = tmp_path / "cache"
    fresh = verify_cache(root)
    assert [f.problem.split(",")[0] for f in fresh.warnings] == ["data-*.arrow without state.json"]
    for f in target.iterdir():
        os.utime(f, (time.time() - 3600, time.time() - 3600))
    old = verify_cache(root)
    assert [(f.path, f.problem) for f in old.errors if f.kind == "incomplete-save"] == [
        (target, "data-*.arrow without state.json: an interrupted save_to_disk")
    ]


SLOW_PREPARE = """
import time
from datasets import Dataset
def gen():
    for i in range(100000):
        if i == 20:
            print("ready", flush=True)
        if i >= 20:
            time.sleep(0.05)
        yield {"i": i}
Dataset.from_generator(gen, writer_batch_size=5)
"""


@pytest.mark.slow
def test_a_preparation_running_right_now_is_in_progress_not_interrupted(tmp_path: Path) -> None:
    """A `load_dataset` preparation a live process is writing is said to be in progress, being
    written by its pid, as info: not "interrupted"."""
    env = hf_env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_PREPARE], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        report = verify_cache(tmp_path / "cache")
        assert [(f.kind, f.problem) for f in report.findings] == [
            ("incomplete-prepare", f"load_dataset preparation in progress: being written by pid {proc.pid}")
        ]
    finally:
        proc.kill()
        proc.wait()


def test_a_temp_file_being_written_is_never_called_corrupt(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    root = clean_copy(real_cache, tmp_path)
    folder = Path(real_cache["csv_dir"].replace(real_cache["cache"], str(root)))
    tmp = folder / "tmpabcd1234"
    code = (
        f"import time\nf = open({str(tmp)!r}, 'wb')\n"
        "f.write(b'\\xff\\xff\\xff\\xff' + b'x' * 100)\nf.flush()\n"
        "print('ready', flush=True)\ntime.sleep(30)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        report = verify_cache(root)
        assert report.errors == () and report.warnings == ()
        assert [(f.path, f.problem) for f in report.findings] == [(tmp, f"being written by pid {writer.pid}")]
    finally:
        writer.kill()
        writer.wait()
    after = verify_cache(root)
    assert [(f.path, f.problem) for f in after.warnings] == [
        (tmp, "leftover temporary file of a killed writer")
    ]


CONCURRENT = """
import sys, time
from datasets import Dataset, load_from_disk
print("ready", flush=True)
ds = Dataset.from_dict({"i": list(range(4000)), "t": ["row %d" % i for i in range(4000)]})
ds.save_to_disk(sys.argv[1] + "/base")
ds = load_from_disk(sys.argv[1] + "/base")
def slow(x):
    time.sleep(0.00025)
    return {"j": x["i"] * 2}
out = ds.map(slow, writer_batch_size=100)
out.save_to_disk(sys.argv[1] + "/out", num_shards=8)
print(len(load_from_disk(sys.argv[1] + "/out")))
"""


def test_verify_during_live_map_and_save_reports_no_false_error(tmp_path: Path) -> None:
    """verify runs again and again while a map writes its cache file and save_to_disk its shards:
    it reports the file being written as such (at least once), never as an error."""
    env = hf_env(tmp_path)
    root = tmp_path / "cache"
    root.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", CONCURRENT, str(root)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = 0
    seen_live = False
    assert proc.stdout is not None
    proc.stdout.readline()  # "ready": datasets imported; the writes start
    while proc.poll() is None:
        report = verify_cache(root)
        runs += 1
        assert report.errors == (), [(f.path, f.problem) for f in report.errors]
        seen_live = seen_live or any("being written" in f.problem for f in report.findings)
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    assert out.strip() == "4000"  # after "ready"
    assert runs >= 3
    assert seen_live, "no verify ran while the map was writing: the test proved nothing"
    assert verify_cache(root).errors == ()


def test_quarantine_moves_broken_files_aside_and_restore_puts_them_back(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    root = clean_copy(real_cache, tmp_path)
    target = cut(between_batches)(root, real_cache)
    result = CliRunner().invoke(
        app, ["verify", "--cache-dir", str(root), "--quarantine", "--yes", "--json"], catch_exceptions=False
    )
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert [q["from"] for q in doc["quarantined"]] == [str(target)]
    assert not target.exists() and Path(doc["quarantined"][0]["to"]).is_file()
    assert verify_cache(root).errors == ()  # datasets would now recompute it
    assert restore(root) == [(Path(doc["quarantined"][0]["to"]), target)]
    assert target.is_file() and len(verify_cache(root).errors) == 1


def test_cli_exit_codes_strict_and_github_format(real_cache: dict[str, Any], tmp_path: Path) -> None:
    root = clean_copy(real_cache, tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["verify", "--cache-dir", str(root)]).exit_code == 0
    stale_lock(root, real_cache)
    assert runner.invoke(app, ["verify", "--cache-dir", str(root)]).exit_code == 0
    assert runner.invoke(app, ["verify", "--cache-dir", str(root), "--strict"]).exit_code == 1
    gh = runner.invoke(app, ["verify", "--cache-dir", str(root), "--format", "github"])
    assert gh.stdout.startswith(f"::warning file={root}/csv/gone_builder.lock::stale lock")
    bad = runner.invoke(app, ["verify", "--cache-dir", str(root), "--record"])
    assert bad.exit_code == 2 and bad.stderr.startswith("Error: --record needs --deep")
    unknown = runner.invoke(app, ["verify", "zzzz", "--cache-dir", str(root)])
    assert unknown.exit_code == 2
    one = json.loads(
        runner.invoke(
            app, ["verify", real_cache["csv_source"][:8], "--cache-dir", str(root), "--json"]
        ).stdout
    )
    assert one["entries_checked"] == 1 and one["counts"]["error"] == 0
    assert Severity.ERROR.value == "error"


def test_restore_does_not_trust_the_log(real_cache: dict[str, Any], tmp_path: Path) -> None:
    """A record pointing outside the quarantine folder or the root moves nothing; garbage lines
    are skipped with a warning, never a traceback."""
    root = clean_copy(real_cache, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("keep me")
    log = root / ".cachetool" / "quarantine" / "log.jsonl"
    log.parent.mkdir(parents=True)
    records = [
        {"action": "quarantine", "to": str(victim), "from": str(tmp_path / "elsewhere" / "stolen.txt")},
        {"action": "quarantine", "to": str(victim), "from": str(root / "csv" / "stolen.txt")},
        {"action": "quarantine"},
        [1, 2],
    ]
    log.write_text("\n".join(json.dumps(r) for r in records) + "\nnot json\n")
    said: list[str] = []
    assert restore(root, warn=said.append) == []
    assert victim.read_text() == "keep me" and not (tmp_path / "elsewhere").exists()
    # three unreadable lines, and the one pending record whose source is outside the quarantine
    assert len(said) == 4 and all("log.jsonl" in w for w in said)
    result = CliRunner().invoke(
        app, ["verify", "--cache-dir", str(root), "--restore"], catch_exceptions=False
    )
    assert result.exit_code == 0 and "Traceback" not in result.output


def test_quarantined_source_split_is_prepared_again_by_datasets(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    """dataset_info.json goes with a damaged split, so load_dataset prepares instead of crashing."""
    root = clean_copy(real_cache, tmp_path)
    folder = Path(real_cache["csv_dir"].replace(real_cache["cache"], str(root)))
    split = folder / "csv-train.arrow"
    split.write_bytes(split.read_bytes()[:500])
    report = quarantine_report(root)
    assert {p.name for p, _ in report.quarantined} == {"dataset_info.json", "csv-train.arrow"}
    csv = Path(real_cache["base"]) / "data" / "items.csv"
    code = (
        "from datasets import load_dataset\n"
        f"print(len(load_dataset('csv', data_files={str(csv)!r}, split='train')))"
    )
    proc = forks.run(
        [sys.executable, "-c", code],
        env=hf_env(tmp_path, HF_DATASETS_CACHE=str(root)),
        capture_output=True,
        text=True,
        timeout=120,
        preload=forks.PIPELINE,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "300"
    assert verify_cache(root).errors == ()


def quarantine_report(root: Path) -> VerifyReport:
    from cachetool.maintenance.verify.quarantine import quarantine

    return quarantine(verify_cache(root))


def test_a_failing_quarantine_is_a_finding_not_a_traceback(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    root = clean_copy(real_cache, tmp_path)
    target = cut(between_batches)(root, real_cache)
    (root / ".cachetool").mkdir(exist_ok=True)
    (root / ".cachetool" / "quarantine").write_text("in the way")
    result = CliRunner().invoke(
        app, ["verify", "--cache-dir", str(root), "--quarantine", "--yes", "--json"], catch_exceptions=False
    )
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["quarantined"] == [] and target.exists()
    assert [f["problem"].split(":")[0] for f in doc["findings"] if f["severity"] == "warning"] == [
        "not quarantined"
    ]


def test_indices_of_a_broken_parent_are_not_blamed(real_cache: dict[str, Any], tmp_path: Path) -> None:
    root = clean_copy(real_cache, tmp_path)
    source = Path(real_cache["csv_dir"].replace(real_cache["cache"], str(root))) / "csv-train.arrow"
    source.write_bytes(source.read_bytes()[:-8])  # no end-of-stream marker: rows still readable
    assert [f.path for f in verify_cache(root).errors] == [source]


# -- quarantine as a plan ------------------------------------------------------------------------


def _one_broken(root: Path) -> Path:
    """A cache of two derived files, the first cut before its end-of-stream marker (an error)."""
    from tests.attack.races import synthesize_cache

    target = synthesize_cache(root, 2)[0]
    target.write_bytes(target.read_bytes()[:-8])
    return target


def test_quarantine_dry_run_says_what_would_move_and_moves_nothing(tmp_path: Path) -> None:
    """`verify --quarantine --dry-run` lists the broken file under "would quarantine" (JSON:
    `would_quarantine`), exits 1 for the error, and leaves the file and the quarantine folder
    alone; `--dry-run` alone is a usage error."""
    root = tmp_path / "cache"
    target = _one_broken(root)
    args = ["verify", "--cache-dir", str(root), "--quarantine", "--dry-run"]
    human = CliRunner().invoke(app, args, env={"COLUMNS": "200"}, catch_exceptions=False)
    assert human.exit_code == 1
    assert f"would quarantine {target.relative_to(root)}" in human.stdout.splitlines()
    assert "run again without --dry-run" in human.stderr
    doc = json.loads(CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False).stdout)
    assert doc["would_quarantine"] == [str(target)] and doc["quarantined"] == []
    assert target.is_file() and not (root / ".cachetool" / "quarantine").exists()
    alone = CliRunner().invoke(app, ["verify", "--cache-dir", str(root), "--dry-run"])
    assert alone.exit_code == 2 and alone.stderr.startswith("Error: --dry-run needs --quarantine")


def test_quarantine_without_yes_and_without_a_terminal_refuses(tmp_path: Path) -> None:
    """Without a terminal and without `--yes`, `verify --quarantine` prints what it would move,
    says in one line to pass --yes, exits 2 and moves nothing; with `--yes` it moves the file."""
    root = tmp_path / "cache"
    target = _one_broken(root)
    args = ["verify", "--cache-dir", str(root), "--quarantine", "--json"]
    refused = CliRunner().invoke(app, args, catch_exceptions=False)
    assert refused.exit_code == 2
    assert refused.stderr == "Error: refusing to quarantine 1 file(s) without confirmation: pass --yes\n"
    assert json.loads(refused.stdout)["would_quarantine"] == [str(target)]
    assert target.is_file() and not (root / ".cachetool" / "quarantine").exists()
    done = CliRunner().invoke(app, [*args, "-y"], catch_exceptions=False)
    assert done.exit_code == 1
    assert [q["from"] for q in json.loads(done.stdout)["quarantined"]] == [str(target)]
    assert not target.exists()


@pytest.mark.parametrize("answer", ["n", "y"])
def test_quarantine_asks_on_a_terminal(tmp_path: Path, answer: str) -> None:
    """On a terminal `verify --quarantine` shows what it would move and asks; "n" moves
    nothing, "y" moves the broken file into the quarantine folder."""
    import pty

    root = tmp_path / "cache"
    target = _one_broken(root)
    master, slave = pty.openpty()
    os.write(master, f"{answer}\n".encode())
    try:
        proc = forks.run(
            [sys.executable, "-m", "cachetool", "verify", "--cache-dir", str(root), "--quarantine"],
            stdin=slave,
            capture_output=True,
            text=True,
            env={**hf_env(tmp_path), "COLUMNS": "200"},
            timeout=120,
        )
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"  {target.relative_to(root)}" in proc.stdout.splitlines()
    assert "Quarantine 1 file(s)? [y/N]" in proc.stdout
    if answer == "n":
        assert target.is_file() and "quarantined " not in proc.stdout
        assert "nothing moved" in proc.stderr
    else:
        assert not target.exists()
        assert f"quarantined {target.relative_to(root)} ->" in proc.stdout
        assert list((root / ".cachetool" / "quarantine").glob(f"*/**/{target.name}"))


def test_verify_cache_quarantine_keywords(tmp_path: Path) -> None:
    """`verify_cache(quarantine=True, dry_run=True)` plans only; `confirm` returning False moves
    nothing; `quarantine=True` moves; `restore=True` puts the file back before verifying."""
    root = tmp_path / "cache"
    target = _one_broken(root)
    planned = verify_cache(root, quarantine=True, dry_run=True)
    assert planned.would_quarantine == (target,) and target.is_file()
    asked: list[int] = []

    def decline(plan: QuarantinePlan) -> bool:
        asked.append(len(plan.paths))
        return False

    declined = verify_cache(root, quarantine=True, confirm=decline)
    assert asked == [1] and declined.quarantined == () and target.is_file()
    moved = verify_cache(root, quarantine=True)
    assert [src for src, _ in moved.quarantined] == [target] and not target.exists()
    back = verify_cache(root, restore=True)
    assert [dst for _, dst in back.restored] == [target] and [f.path for f in back.errors] == [target]


def test_every_finding_code_has_one_severity() -> None:
    """The severity of a finding (and so verify's exit code) comes from its code alone: every
    code has exactly one, and the three severities are all used."""
    from typing import get_args

    from cachetool.maintenance.verify.findings import SEVERITY, Code

    assert set(SEVERITY) == set(get_args(Code))
    assert set(SEVERITY.values()) == set(Severity)


def test_quarantines_in_one_second_from_one_process_each_get_a_folder(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    """`quarantine(verify_cache(root))` called again and again (a file datasets writes broken
    again and again): each call moves the file into a folder of its own, even two calls in the
    same second from the same process (both were `<time>-<pid>`: the second failed, `File
    exists`). The root holds that file alone. After the first call, the folder a call of this
    process would take in each of the next 60 seconds is there already, as the first call's is in
    its own second: the second call shares a second with a call before it however loaded the
    machine is (waiting for two calls to fall in one second took up to a minute under load)."""
    from cachetool.maintenance.verify.quarantine import quarantine

    full = clean_copy(real_cache, tmp_path / "full")
    broken = cut(between_batches)(full, real_cache)
    root = tmp_path / "cache"
    target = root / broken.relative_to(full)
    target.parent.mkdir(parents=True)
    shutil.copy2(broken, target)
    quarantined = root / ".cachetool" / "quarantine"
    folders: list[str] = []
    for call in range(3):
        done = quarantine(verify_cache(root))
        assert [p for p, _ in done.quarantined] == [target], done.findings
        moved_to = done.quarantined[0][1].relative_to(quarantined)
        assert moved_to.parts[1:] == target.relative_to(root).parts
        folders.append(moved_to.parts[0])  # the call's folder
        os.rename(done.quarantined[0][1], target)  # back where datasets would write it
        if call == 0:
            start = time.time()
            for second in range(61):
                taken = f"{time.strftime('%Y%m%dT%H%M%S', time.localtime(start + second))}-{os.getpid()}"
                (quarantined / taken).mkdir(exist_ok=True)
    assert folders[1].endswith("-2") and folders[2].endswith(("-2", "-3")), folders
    assert len(set(folders)) == len(folders)


def test_a_saved_dataset_whose_data_files_are_all_gone_is_an_error_from_its_own_folder(
    tmp_path: Path,
) -> None:
    """A saved split (of a DatasetDict) and a saved Dataset whose data files were all deleted:
    `verify --cache-dir <the folder itself>` reports the missing file as an error (exit 1), as verify
    of the dict's folder does; it said "0 errors". The hint says that nothing recomputes a
    save_to_disk folder (it said "datasets will recompute it"), and `gc --temp` keeps the folder."""
    from datasets import Dataset, DatasetDict

    ds = Dataset.from_dict({"x": list(range(20))})
    saved, one = tmp_path / "saved", tmp_path / "one"
    DatasetDict(train=ds, test=ds.select(range(5))).save_to_disk(str(saved))
    ds.save_to_disk(str(one))
    for folder in (saved / "test", one):
        for f in folder.glob("data-*.arrow"):
            f.unlink()
    env = hf_env(tmp_path)
    for root in (saved / "test", saved, one):
        said = CliRunner().invoke(app, ["verify", "--json", "--cache-dir", str(root)], env=env)
        assert said.exit_code == 1, (root, said.stdout)
        (finding,) = [f for f in json.loads(said.stdout)["findings"] if f["severity"] == "error"]
        assert finding["problem"] == "state.json names data-00000-of-00001.arrow, which is missing", finding
        assert "recompute it" not in finding["hint"] and "save_to_disk" in finding["hint"], finding
    human = CliRunner().invoke(
        app, ["verify", "--cache-dir", str(saved / "test")], env={**env, "COLUMNS": "200"}
    )
    assert "1 error(s)" in human.stdout and "datasets will recompute" not in human.stdout, human.stdout

    for root in (saved / "test", one):
        gone = CliRunner().invoke(
            app, ["gc", "--temp", "--min-age", "0", "-y", "--cache-dir", str(root)], env=env
        )
        assert gone.exit_code == 0, gone.stdout
        assert (root / "state.json").exists()


NUM_PROC_MAP = """\
import sys, time
from pathlib import Path
import datasets
from datasets import load_dataset

datasets.logging.set_verbosity_info()

def double(ex, rank):
    if rank == 1 and sys.argv[3] == "slow":
        Path(sys.argv[2]).write_text("busy")
        time.sleep(0.02)
    return {"y": ex["x"] * 2}

ds = load_dataset("csv", data_files=sys.argv[1], split="train")
ds.map(double, with_rank=True, num_proc=2, writer_batch_size=10)
print("finished")
"""


def kill_num_proc_map_after_shard_0(tmp_path: Path, env: dict[str, str]) -> Path:
    """Run NUM_PROC_MAP on 400 rows in `tmp_path` and SIGKILL it (with its workers) once shard 0
    is finished and shard 1 is a tmp file with data; the cache folder (`tmp_path / "cache"`)."""
    (tmp_path / "p.py").write_text(NUM_PROC_MAP, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(400)), encoding="utf-8")
    cache, marker = tmp_path / "cache", tmp_path / "busy"
    proc = subprocess.Popen(
        [sys.executable, "p.py", "d.csv", str(marker), "slow"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (
            marker.exists()
            and list(cache.rglob("cache-*_00000_of_00002.arrow"))
            and [p for p in cache.rglob("tmp*") if p.is_file() and p.stat().st_size > 0]
        ):
            assert proc.poll() is None and time.monotonic() < deadline, "the map never got under way"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return cache


def test_quarantine_keeps_the_finished_shards_of_a_killed_num_proc_map(tmp_path: Path) -> None:
    """A `num_proc=2` map killed (with its workers) after shard 0 finished, while shard 1 was still
    a tmp file: verify reports the partial shard set as a warning (datasets reuses the finished
    shard and computes the rest), not an error, with a hint: the next run finishes it, and the gc
    command that removes it if none will. `verify --quarantine -y` leaves the finished
    shard in place (it moved it aside); the rerun reuses it ("Reprocessing 1/2 shards")."""
    env = hf_env(tmp_path)
    cache = kill_num_proc_map_after_shard_0(tmp_path, env)
    (finished,) = cache.rglob("cache-*_00000_of_00002.arrow")
    assert not list(cache.rglob("cache-*_00001_of_00002.arrow"))

    said = CliRunner().invoke(app, ["verify", "--json", "--cache-dir", str(cache)], env=env)
    doc = json.loads(said.stdout)
    assert said.exit_code == 0 and doc["counts"]["error"] == 0, [
        (f["problem"], f["path"]) for f in doc["findings"]
    ]
    (partial,) = [f for f in doc["findings"] if f["path"] == str(finished)]
    assert partial["severity"] == "warning" and partial["problem"].startswith("partial: 1 of 2 shards"), (
        partial
    )
    assert "reuses" in partial["problem"], partial
    fp = partial["entry"]
    assert partial["hint"] == (
        "the next run of the map finishes it; if none will, remove it with "
        f"`cachetool gc {fp} --min-age 0 --cache-dir {cache}`"
    ), partial

    moved = CliRunner().invoke(
        app, ["verify", "--quarantine", "-y", "--json", "--cache-dir", str(cache)], env=env
    )
    assert moved.exit_code == 0, moved.stdout
    assert json.loads(moved.stdout)["quarantined"] == []
    assert finished.exists()

    rerun = subprocess.run(
        [sys.executable, "p.py", "d.csv", str(tmp_path / "busy"), "fast"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert rerun.returncode == 0 and "finished" in rerun.stdout, rerun.stderr
    assert "Reprocessing 1/2 shards" in rerun.stderr, rerun.stderr


GC_THEN_VERIFY = """\
import sys
from datasets import load_dataset

ds = load_dataset("csv", data_files=sys.argv[1], split="train")
a = ds.map(lambda ex: {"y": ex["x"] * 2})
b = a.map(lambda ex: {"z": ex["y"] + 1})
c = b.map(lambda ex: {"w": ex["z"] + 1})
print(a._fingerprint, b._fingerprint, c._fingerprint)
"""


def test_verify_and_report_leave_out_what_gc_removed_and_logged(tmp_path: Path) -> None:
    """After `gc` removed two traced steps' files (and logged it in the ledger), `verify` says
    nothing of them: what gc removed is history. A file a user deleted still gets its info line,
    and `report` lists a leftover once (it listed it as a leftover and again as verify's
    finding)."""
    from cachetool.report.data import build_report
    from tests.conftest import cachetool_run

    (tmp_path / "p.py").write_text(GC_THEN_VERIFY, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(50)), encoding="utf-8")
    env = hf_env(tmp_path)
    cache = tmp_path / "cache"
    a, b, c = cachetool_run("p.py", "d.csv", env=env, cwd=tmp_path, warm=True).stdout.split()
    (c_file,) = cache.rglob(f"cache-{c}.arrow")
    said = CliRunner().invoke(app, ["gc", a, b, "--min-age", "0", "-y", "--cache-dir", str(cache)], env=env)
    assert said.exit_code == 0, said.stdout
    c_file.unlink()  # the user's own doing
    leftover = c_file.with_name("tmpab12cd34")
    leftover.write_bytes(b"")
    os.utime(leftover, (time.time() - 7200, time.time() - 7200))

    doc = json.loads(CliRunner().invoke(app, ["verify", "--json", "--cache-dir", str(cache)], env=env).stdout)
    gone = [f["path"] for f in doc["findings"] if f["problem"].startswith("recorded file no longer exists")]
    assert gone == [str(c_file)], gone

    problems = [p for p in build_report(cache).problems if p.path == str(leftover)]
    assert len(problems) == 1, problems


def test_verify_cache_validates_its_options_and_its_report_has_the_exit_code(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    """`verify_cache` refuses what `cachetool verify` refuses (`record` needs `deep`, `dry_run`
    needs `quarantine`) before reading anything, and its report carries the command's exit code:
    0 clean, 1 with an error."""
    from cachetool.errors import CachetoolError

    with pytest.raises(CachetoolError, match="--record needs --deep"):
        verify_cache(tmp_path, record=True)
    with pytest.raises(CachetoolError, match="--dry-run needs --quarantine"):
        verify_cache(tmp_path, dry_run=True)
    root = clean_copy(real_cache, tmp_path)
    assert verify_cache(root).exit_code == 0
    target = find(root, f"cache-{real_cache['mapped']}.arrow")
    target.write_bytes(target.read_bytes()[:-8])
    report = verify_cache(root)
    assert report.errors and report.exit_code == 1


def test_verify_options_are_refused_alike_by_the_command_and_the_function(tmp_path: Path) -> None:
    """Every option check lives in `VerifyOptions`: `--jobs 0` and `--list` without `--quarantine`
    are one `Error:` line (exit 2) from the command, and the same `CachetoolError` (naming the
    flag and the keyword) from `verify_cache`/`VerifyOptions`, before the root is even looked at;
    a single string of fingerprints is refused, not read letter by letter."""
    from cachetool.errors import CachetoolError
    from cachetool.maintenance.verify import VerifyOptions

    missing = tmp_path / "no-such-cache"
    for args, words in (
        (["--jobs", "0"], "Error: invalid --jobs 0: must be at least 1 (jobs=None"),
        (["--list"], "Error: --list needs --quarantine"),
        (["--record"], "Error: --record needs --deep (record=True needs deep=True)"),
    ):
        result = CliRunner().invoke(app, ["verify", *args, "--cache-dir", str(missing)])
        assert result.exit_code == 2 and result.stderr.startswith(words), (args, result.stderr)
    with pytest.raises(CachetoolError, match="invalid --jobs 0"):
        verify_cache(missing, jobs=0)
    with pytest.raises(CachetoolError, match="--list needs --quarantine"):
        VerifyOptions(list_quarantine=True)
    with pytest.raises(CachetoolError, match="not one string"):
        verify_cache(missing, "7a57")


ONE_MAP = """\
import sys
from datasets import load_dataset

ds = load_dataset("csv", data_files=sys.argv[1], split="train")
print(ds.map(lambda ex: {"y": ex["x"] * 2})._fingerprint)
"""


def test_the_quarantine_shows_in_ls_and_its_list_and_restore_says_once_why_a_file_stays(
    tmp_path: Path,
) -> None:
    """A damaged cache file moved aside by `verify --quarantine` shows: `ls` ends with the
    quarantine's size and the command that lists it, and `verify --quarantine --list` names it
    (where it came from, its size, its problem; `--json` too). Once the pipeline made the file
    again, `verify --restore` says why the quarantined one cannot go back, once: the next restore
    is quiet about it, and the list says it."""
    (tmp_path / "p.py").write_text(ONE_MAP, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(50)), encoding="utf-8")
    env = {**hf_env(tmp_path), "COLUMNS": "250"}
    cache = tmp_path / "cache"
    run = [sys.executable, "p.py", "d.csv"]
    fp = subprocess.run(
        run, cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    (damaged,) = cache.rglob(f"cache-{fp}.arrow")
    damaged.write_bytes(damaged.read_bytes()[:-8])
    moved = CliRunner().invoke(app, ["verify", "--quarantine", "-y", "--cache-dir", str(cache)], env=env)
    assert not damaged.exists(), moved.stdout

    listing = CliRunner().invoke(app, ["ls", "--cache-dir", str(cache)], env=env).stdout
    command = f"cachetool verify --quarantine --list --cache-dir {cache}"
    assert "quarantine: 1 item, " in listing and f"`{command}`" in listing, listing
    said = CliRunner().invoke(app, ["verify", "--quarantine", "--list", "--cache-dir", str(cache)], env=env)
    assert said.exit_code == 0 and damaged.name in said.stdout and "no end-of-stream marker" in said.stdout
    (item,) = json.loads(
        CliRunner()
        .invoke(app, ["verify", "--quarantine", "--list", "--json", "--cache-dir", str(cache)], env=env)
        .stdout
    )["quarantine"]
    assert item["from"] == str(damaged) and item["size"] > 0 and item["stays"] is None, item

    subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, check=True)  # datasets makes it again
    assert damaged.exists()
    first = CliRunner().invoke(app, ["verify", "--restore", "--cache-dir", str(cache)], env=env)
    assert first.stderr.count("cannot go back: something new is in its place") == 1, first.stderr
    again = CliRunner().invoke(app, ["verify", "--restore", "--cache-dir", str(cache)], env=env)
    assert "cannot go back" not in again.stderr and "nothing to restore" in again.stderr, again.stderr
    (item,) = json.loads(
        CliRunner()
        .invoke(app, ["verify", "--quarantine", "--list", "--json", "--cache-dir", str(cache)], env=env)
        .stdout
    )["quarantine"]
    assert item["stays"] == "something new is in its place", item

    # The purge: `gc --quarantine` removes what the quarantine holds, `--older-than` counting
    # from when it was moved aside; it is a run of its own.
    qpath = Path(item["path"])
    gc = ["gc", "--quarantine", "--cache-dir", str(cache)]
    mixed = CliRunner().invoke(app, [*gc, "--temp"], env=env)
    assert mixed.exit_code == 2 and mixed.stderr.count("\n") == 1 and "--quarantine" in mixed.stderr
    young = CliRunner().invoke(app, [*gc, "--older-than", "1d", "-y"], env=env)
    assert young.exit_code == 0 and qpath.exists(), young.output
    assert "quarantined in the last 1d" in young.stdout, young.stdout
    plan = json.loads(CliRunner().invoke(app, [*gc, "--dry-run", "--json"], env=env).stdout)["plan"]
    (purge,) = plan["items"]
    assert purge["action"] == "purge" and purge["path"] == str(qpath) and qpath.exists(), purge
    assert "no end-of-stream marker" in purge["reason"] and str(damaged) in purge["reason"], purge
    done = CliRunner().invoke(app, [*gc, "-y"], env=env)
    assert done.exit_code == 0 and not qpath.exists() and damaged.exists(), done.output
    listed = CliRunner().invoke(app, ["verify", "--quarantine", "--list", "--cache-dir", str(cache)], env=env)
    assert "The quarantine is empty." in listed.stdout, listed.stdout
    assert "quarantine:" not in CliRunner().invoke(app, ["ls", "--cache-dir", str(cache)], env=env).stdout
    from cachetool.history.ledger import read_ledger

    assert [r.path for r in read_ledger(cache).gc_records()][-1] == str(qpath)


FILTER_THEN_SORT = """\
import sys
from datasets import load_dataset

ds = load_dataset("csv", data_files=sys.argv[1], split="train")
ds.filter(lambda ex: ex["x"] % 3 == 0, num_proc=2).sort("x", reverse=True)
"""


def test_indices_made_from_a_num_proc_filter_index_the_data_below_it(tmp_path: Path) -> None:
    """A `num_proc=2` filter writes its indices as shards; a `sort` after it writes indices into
    the data below them (300 rows), not into the filter's 100 indices: `verify` of that healthy
    traced cache finds no error. With the data removed, the sort's indices are an orphan (a
    warning), not "out of bounds"."""
    (tmp_path / "p.py").write_text(FILTER_THEN_SORT, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(300)), encoding="utf-8")
    env = hf_env(tmp_path)
    cachetool_run("p.py", "d.csv", env=env, cwd=tmp_path, warm=True)
    root = tmp_path / "cache"
    kinds = {(e.kind, e.content) for e in scan_cache(root).entries}
    assert {(Kind.SHARDS, "indices"), (Kind.INDICES, "indices")} <= kinds, kinds
    assert errors(verify_cache(root)) == []
    (source,) = root.rglob("csv-train.arrow")
    source.unlink()
    report = verify_cache(root)
    assert errors(report) == []
    assert [f.code for f in report.warnings if f.kind == "indices"] == ["orphan-indices"]


QUARANTINED_PIPELINE = """\
import sys
from datasets import load_dataset
ds = load_dataset("csv", data_files=sys.argv[1], split="train").map(lambda e: {"y": e["x"] * 2})
print(ds._fingerprint)
"""


@pytest.mark.slow
def test_show_and_explain_name_the_quarantine_a_damaged_result_went_to(tmp_path: Path) -> None:
    """A map's cache file is damaged; `verify --quarantine` moves it aside. `show` says it is in
    quarantine and where, and after the pipeline recomputes it, `explain` says the old file was
    quarantined by verify (it said "gone (deleted, cleaned up, or load_from_cache_file=False)")."""
    (tmp_path / "p.py").write_text(QUARANTINED_PIPELINE)
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(50)))
    env = hf_env(tmp_path)
    fp = cachetool_run("p.py", "d.csv", env=env, cwd=tmp_path, warm=True).stdout.split()[-1]
    root = Path(env["HF_DATASETS_CACHE"])
    (damaged,) = root.rglob(f"cache-{fp}.arrow")
    damaged.write_bytes(damaged.read_bytes()[:300])
    runner = CliRunner()
    moved = runner.invoke(app, ["verify", "--cache-dir", str(root), "--quarantine", "--yes"], env=env)
    assert moved.exit_code == 1 and not damaged.exists(), moved.output
    (where,) = (root / ".cachetool" / "quarantine").rglob(damaged.name)

    show = runner.invoke(app, ["show", fp, "--cache-dir", str(root)], env={**env, "COLUMNS": "300"})
    assert "quarantined by cachetool verify" in show.stdout and str(where) in show.stdout, show.stdout

    assert cachetool_run("p.py", "d.csv", env=env, cwd=tmp_path, warm=True).stdout.split()[-1] == fp
    said = runner.invoke(app, ["explain", fp, "--cache-dir", str(root)], env={**env, "COLUMNS": "300"})
    assert "quarantined by cachetool verify at " in said.stdout and str(where) in said.stdout, said.stdout
    assert "gone (deleted" not in said.stdout
