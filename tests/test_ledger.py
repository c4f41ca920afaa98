"""The ledger: per-process segments, merged by readers that survive torn and future records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cachetool.cache.roots import fallback_ledger_dir, known_roots, ledger_dir
from cachetool.history.ledger import MAX_LINE_BYTES, read_ledger
from cachetool.history.writer import LedgerWriter


@pytest.fixture(autouse=True)
def _user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHETOOL_HOME", str(tmp_path / "cachetool_home"))


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "CACHETOOL_HOME": str(tmp_path / "cachetool_home")}


def _record(i: int, result: str, parent: str | None = None, **extra: object) -> dict[str, object]:
    rec: dict[str, object] = {
        "v": 1,
        "type": "transform",
        "seq": i,
        "time": 1000.0 + i,
        "duration": 0.5,
        "operation": "map",
        "result": result,
        "parents": [parent] if parent else [],
        "internal": False,
        "cache": "miss",
    }
    rec.update(extra)
    return rec


WRITER = textwrap.dedent(
    """\
    import os, sys
    from cachetool.history.writer import LedgerWriter
    root, n, worker = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    w = LedgerWriter()
    for i in range(n):
        w.append(root, {"v": 1, "type": "transform", "seq": i, "time": 1.0, "worker": worker,
                        "result": f"{worker:04d}{i:012d}", "parents": [], "payload": "x" * (i % 300)})
    """
)


@pytest.mark.slow
def test_eight_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    """8 processes appending 500 records each to one root: every one of the 4,000 reads back intact."""
    root = tmp_path / "cache"
    root.mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(root), "500", str(w)], env=_env(tmp_path))
        for w in range(8)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0] * 8
    got = read_ledger(root)
    assert got.warnings == ()
    assert len(got.segments) == 8  # one segment per process, named by host, pid and start time
    assert len(got.records) == 4000
    seen = {(r.extra["worker"], r.seq) for r in got.records}
    assert seen == {(w, i) for w in range(8) for i in range(500)}
    assert all(r.extra["payload"] == "x" * (r.seq % 300) for r in got.records)
    assert str(root) in known_roots()


KILLED = textwrap.dedent(
    """\
    import os, sys, time
    from cachetool.history.writer import LedgerWriter
    root = sys.argv[1]
    w = LedgerWriter()
    for i in range(20):
        w.append(root, {"v": 1, "type": "transform", "seq": i, "time": 1.0, "result": f"fp{i:014d}",
                        "parents": []})
    # The kernel may cut a large write short when a fatal signal arrives; this is the state it leaves.
    seg = w._segments[root]
    os.write(seg._fd, b'{"v": 1, "type": "transform", "seq": 20, "result": "fp000000000000')
    print("ready", flush=True)
    time.sleep(60)
    """
)


@pytest.mark.slow
def test_a_writer_killed_mid_record_leaves_a_torn_tail_that_is_skipped(tmp_path: Path) -> None:
    """SIGKILL in the middle of a record: the torn last line is skipped with a warning, the 20
    records before it survive, and the cheap reader used by `ls` does not stumble."""
    root = tmp_path / "cache"
    root.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(root)], stdout=subprocess.PIPE, text=True, env=_env(tmp_path)
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    got = read_ledger(root)
    assert [r.seq for r in got.records] == list(range(20))
    assert len(got.warnings) == 1
    assert "torn last record" in got.warnings[0]
    assert set(read_ledger(root).usage()) == {f"fp{i:014d}" for i in range(20)}


#: Three gc records; the second hits a file size limit (RLIMIT_FSIZE: the kernel writes part of
#: it and fails the rest, as a full disk does), then the limit is lifted (gc freed the space).
TORN_BY_A_FULL_DISK = textwrap.dedent(
    """\
    import resource, signal, sys
    from cachetool.history.writer import GcLog
    from cachetool.cache.roots import ledger_dir
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    root = sys.argv[1]
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    with GcLog(root) as log:
        def removed(i):
            log.removed(kind="derived", paths=[f"{root}/cache-{i}.arrow"], size=1, files=1,
                        reason="older than 30d", fingerprint=f"{i:016x}", when=1000.0 + i)
        removed(1)
        (segment,) = ledger_dir(root).glob("*.jsonl")
        resource.setrlimit(resource.RLIMIT_FSIZE, (segment.stat().st_size + 40, hard))
        removed(2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        removed(3)
    print(segment.stat().st_size)
    """
)


@pytest.mark.slow
def test_a_record_after_a_torn_one_starts_on_a_fresh_line(tmp_path: Path) -> None:
    """gc logs a removal while the disk is full (the kernel writes part of the record), space
    comes back, and gc logs the next removal: that record is read back whole, not glued to the
    torn one; only the torn one is skipped, with a warning."""
    root = tmp_path / "cache"
    root.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", TORN_BY_A_FULL_DISK, str(root)],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = read_ledger(root)
    assert [r.fingerprint for r in got.gc_records()] == [f"{1:016x}", f"{3:016x}"]
    assert len(got.warnings) == 1 and "skipped an unreadable record" in got.warnings[0]


def test_records_from_a_newer_version_are_read_with_their_unknown_fields(tmp_path: Path) -> None:
    """A ledger written by a newer cachetool (v2, fields this one does not know) still reads."""
    root = tmp_path / "cache"
    seg = ledger_dir(root) / "otherhost-1-20300101T000000.000000Z.jsonl"
    seg.parent.mkdir(parents=True)
    future = _record(1, "bbbb", "aaaa", v=2, quantum={"entangled": True}, operation="teleport")
    lines = [json.dumps(_record(0, "aaaa")), json.dumps(future), "not json at all", json.dumps([1, 2])]
    seg.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got = read_ledger(root)
    assert [r.result for r in got.steps()] == ["aaaa", "bbbb"]
    assert got.records[1].extra["quantum"] == {"entangled": True}
    assert len(got.warnings) == 2  # the two bad lines, each named
    usage = read_ledger(root).usage()
    assert usage["bbbb"].parent == "aaaa"
    assert usage["bbbb"].operation == "teleport"
    assert read_ledger(root).for_result("bbbb")[0].extra["quantum"] == {"entangled": True}


def test_no_ledger_means_no_usage(tmp_path: Path) -> None:
    """A cache nobody traced: the scan's ledger lookup returns nothing, cheaply."""
    assert read_ledger(tmp_path).usage() == {}
    assert read_ledger(tmp_path).for_result("abc") == []


def test_usage_has_last_use_parent_operation_and_hit_counts(tmp_path: Path) -> None:
    """The newest use wins `last_used`; being used as a parent counts as a use; a no-op step
    (result equal to its parent) does not hide where a fingerprint came from."""
    root = tmp_path / "cache"
    w = LedgerWriter()
    w.append(str(root), _record(0, "src", None, type="root", operation="load_dataset", cache="hit"))
    w.append(str(root), _record(1, "m1", "src"))
    w.append(str(root), _record(2, "m1", "src", cache="hit"))
    w.append(str(root), _record(3, "m1", "m1", operation="map"))  # function returned None
    w.append(str(root), _record(9, "m2", "m1", operation="filter"))
    w.close()
    usage = read_ledger(root).usage()
    assert usage["m1"].parent == "src" and usage["m1"].operation == "map"
    assert (usage["m1"].hits, usage["m1"].misses) == (1, 1)
    assert usage["src"].last_used == pytest.approx(1002.5)  # last used as m1's parent
    assert usage["m1"].last_used == pytest.approx(1009.5)  # last used as m2's parent
    assert usage["m2"].parents == ("m1",)
    assert usage["src"].parent is None and usage["src"].operation == "load_dataset"


def test_an_unwritable_root_falls_back_to_the_user_folder_and_says_so_once(tmp_path: Path) -> None:
    """When `<root>/.cachetool` cannot be created, records go to the per-user fallback, one warning
    says where, and readers of the root still find them."""
    root = tmp_path / "cache"
    root.mkdir()
    (root / ".cachetool").write_text("in the way")  # mkdir fails even for root (read-only mounts too)
    said: list[str] = []
    w = LedgerWriter(warn=said.append)
    for i in range(3):
        w.append(str(root), _record(i, f"fp{i}"))
    w.close()
    assert len(said) == 1
    assert str(fallback_ledger_dir(root)) in said[0]
    assert [r.result for r in read_ledger(root).steps()] == ["fp0", "fp1", "fp2"]
    assert "fp2" in read_ledger(root).usage()


@pytest.mark.parametrize(
    ("field", "bad", "why"),
    [
        ("parents", 5, "'parents' is not a list of strings"),
        ("duration", "abc", "'duration' is not a finite number"),
        ("files", 5, "'files' is not a list of objects"),
        ("time", float("inf"), "'time' is not a finite number"),
        ("args", {"x": 3}, "'args.x' is not an object"),
        ("call_site", {"line": "twelve"}, "'call_site.line' is not an integer"),
        ("cache", "maybe", "'cache' is not one of"),
    ],
)
def test_a_record_with_a_field_of_the_wrong_type_is_skipped_with_a_warning(
    tmp_path: Path, field: str, bad: object, why: str
) -> None:
    """One record with a wrong type (`"parents":5`, `"duration":"abc"`, `"time":1e400`, ...) is
    skipped with a warning naming the file, the line and the field; every other record reads."""
    root = tmp_path / "cache"
    seg = ledger_dir(root) / "h-1-20300101T000000.000000Z.jsonl"
    seg.parent.mkdir(parents=True)
    line = json.dumps(_record(1, "bbbb", "aaaa", **{field: bad})).replace("Infinity", "1e400")
    seg.write_text(json.dumps(_record(0, "aaaa")) + "\n" + line + "\n", encoding="utf-8")
    got = read_ledger(root)
    assert [r.result for r in got.steps()] == ["aaaa"]
    assert len(got.warnings) == 1 and got.warnings[0].startswith(f"{seg}:2: skipped a record: {why}")
    assert set(read_ledger(root).usage()) == {"aaaa"}


def test_gc_records_count_files_and_step_records_list_them(tmp_path: Path) -> None:
    """gc's `"files": 1` (a count) and a step's `"files": [...]` (a list) are two classes, so no
    reader can take one for the other; each round-trips through its writer's JSON unchanged."""
    from cachetool.history.ledger import parse_record
    from cachetool.history.records.other import GcRecord
    from cachetool.history.records.steps import StepRecord
    from cachetool.history.writer import GcLog

    root = tmp_path / "cache"
    root.mkdir()
    with GcLog(root) as log:
        log.removed(kind="temp", paths=[root / "tmp1234"], size=10, files=1, reason="leftover", when=2000.0)
    w = LedgerWriter()
    w.append(str(root), _record(0, "aaaa", files=[{"path": "/x.arrow", "size": 3, "status": "written"}]))
    w.close()
    got = read_ledger(root)
    assert got.warnings == ()
    (gc,) = read_ledger(root).gc_records()
    assert isinstance(gc, GcRecord) and gc.files == 1 and gc.paths == (str(root / "tmp1234"),)
    (step,) = got.steps()
    assert isinstance(step, StepRecord) and step.files[0].path == "/x.arrow"
    for rec in got.records:
        assert parse_record(rec.to_json()) == rec


def test_deep_nesting_huge_lines_fifos_and_dev_zero_are_skipped(tmp_path: Path) -> None:
    """200,000 nested brackets, a line over the cap, a FIFO segment and a segment symlinked to
    /dev/zero: each is a warning; the command neither crashes, hangs nor runs out of memory."""
    root = tmp_path / "cache"
    d = ledger_dir(root)
    d.mkdir(parents=True)
    (d / "a-1-x.jsonl").write_text(
        "[" * 200_000
        + "\n"
        + '{"v":1,"type":"transform","x":"'
        + "y" * MAX_LINE_BYTES
        + '"}\n'
        + json.dumps(_record(0, "aaaa"))
        + "\n",
        encoding="utf-8",
    )
    os.mkfifo(d / "b-2-x.jsonl")
    os.symlink("/dev/zero", d / "c-3-x.jsonl")
    got = read_ledger(root)
    assert [r.result for r in got.steps()] == ["aaaa"]
    text = "\n".join(got.warnings)
    assert "nested too deeply" in text and "at most" in text
    assert text.count("not a regular file") == 2


@pytest.mark.parametrize(
    "command", [["lineage"], ["show"], ["explain"], ["pin"], ["gc", "--older-than", "1d", "--keep"], ["gc"]]
)
def test_an_ambiguous_prefix_lists_its_candidates_in_at_most_ten_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """30 recorded fingerprints share the prefix `ab`: every command that takes a fingerprint says
    it is ambiguous (exit 2) with the candidates one per line, at most 10 lines in all."""
    from typer.testing import CliRunner

    from cachetool.cli.app import app

    root = tmp_path / "cache"
    root.mkdir()
    w = LedgerWriter()
    for i in range(30):
        w.append(str(root), _record(i, f"ab{i:014d}", "0" * 16))
    w.close()
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, [*command, "ab", "--cache-dir", str(root)], catch_exceptions=False)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.stderr
    assert lines[0].startswith("Error: 'ab' is ambiguous: it matches 30 entries")
    assert 2 < len(lines) <= 10 and lines[1].strip().startswith("ab00000000000000")
    assert lines[-1].strip() == "... and 22 more"


@pytest.mark.slow
def test_a_run_from_a_folder_whose_name_is_not_utf8_is_recorded_readably(tmp_path: Path) -> None:
    """A pipeline run with `cachetool run` from a folder whose name is not UTF-8 (a Latin-1 name):
    its records (script path, working folder, data file) read back with no warning, the path
    bytes as they were, and `explain --last` explains that run."""
    from tests.conftest import cachetool_run, hf_env, invoke

    project = tmp_path / os.fsdecode(b"proj\xe9")
    project.mkdir()
    (project / "d.csv").write_text("x\n1\n2\n", encoding="utf-8")
    (project / "p.py").write_text(
        "from datasets import load_dataset\n"
        "load_dataset('csv', data_files='d.csv', split='train').map(lambda ex: {'y': ex['x'] * 2})\n",
        encoding="utf-8",
    )
    env = hf_env(tmp_path)
    cachetool_run("p.py", env=env, cwd=project, warm=True)
    ledger = read_ledger(tmp_path / "cache")
    assert ledger.warnings == ()
    assert any(r.type == "run-start" for r in ledger.records)
    explained = invoke("explain", "--last", "--cache-dir", str(tmp_path / "cache"), env=env)
    assert explained.exit_code == 0, explained.stderr
    assert "map <lambda> @ p.py:2" in explained.stdout


@pytest.mark.slow
def test_a_ledger_another_user_may_not_read_is_named_not_called_empty(tmp_path: Path) -> None:
    """A cache whose `.cachetool/` another user made under umask 077 (0700): as this user `ls`
    lists the cache (it stopped at "Error: .../.cachetool/ledger: Permission denied"), `explain
    --last` names the ledger folder and says "Permission denied" instead of "no recorded run ...
    run the pipeline with `cachetool run`", and `stats` warns so beside its zeros."""
    from tests.conftest import as_another_user, cachetool_run, hf_env, invoke

    if os.geteuid() != 0:
        pytest.skip("another user's ledger needs root to make")
    (tmp_path / "d.csv").write_text("x\n1\n2\n")
    (tmp_path / "p.py").write_text(
        "from datasets import load_dataset\n"
        "load_dataset('csv', data_files='d.csv', split='train').map(lambda ex: {'y': ex['x'] * 2})\n"
    )
    env = hf_env(tmp_path)
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    root = tmp_path / "cache"
    for dirpath, _, _ in os.walk(tmp_path):
        os.chmod(dirpath, 0o755)
    p = tmp_path
    while p != p.parent:
        os.chmod(p, os.stat(p).st_mode | 0o005)
        p = p.parent
    os.chmod(ledger_dir(root).parent, 0o700)
    args = ("--cache-dir", str(root))
    assert invoke("explain", "--last", *args, env=env).exit_code == 0  # imports what the child needs
    commands = (["explain", "--last"], ["stats"], ["ls", "-q"])
    seen = [invoke(*cmd, *args, env=env).stdout for cmd in commands]

    def as_b() -> list[str]:
        done = [invoke(*cmd, *args, env=env) for cmd in commands]
        return [d.stderr for d in done[:2]] + [d.stdout for d in done[2:]]

    explained, stats, listed = as_another_user(as_b)
    denied = f"{ledger_dir(root)}: Permission denied: its recorded runs are not read"
    assert explained.startswith(f"Error: no recorded run in {root}: {denied}"), explained
    assert f"Warning: {denied}" in stats, stats
    assert listed == seen[2] and listed.strip()
