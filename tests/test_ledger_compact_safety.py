"""Compaction never harms what it does not own: a forged compacted segment cannot make it delete
files outside its folder, a symlinked ledger folder is not followed out of the root, a live
writer's segment is left whole whatever its name says, and lines it cannot read are kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cachetool.cache.roots import ledger_dir
from cachetool.history.compact import compact_ledger
from cachetool.history.ledger_stats import ledger_stats
from tests.conftest import invoke
from tests.test_ledger_compact import DEAD_PID, _segments, _totals, _write_runs


@pytest.fixture(autouse=True)
def _user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHETOOL_HOME", str(tmp_path / "cachetool_home"))


def test_a_forged_compacted_segment_removes_nothing_outside_the_ledger(tmp_path: Path) -> None:
    """A compacted segment whose first record names `../../../victim.txt` and an absolute path
    (sizes matching): `stats --compact` removes neither file, and says the record is not one
    cachetool reads."""
    root = tmp_path / "cache"
    _write_runs(root, 3, 2)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"x" * 22)
    other = tmp_path / "x" / "victim2.txt"
    other.parent.mkdir()
    other.write_bytes(b"y" * 11)
    forged = {
        "v": 1,
        "type": "compaction",
        "time": 1.0,
        "replaces": [["../../../victim.txt", 22], [str(other), 11]],
    }
    name = "compacted-20200101T000000.000000Z-1.jsonl"
    (ledger_dir(root) / name).write_text(json.dumps(forged) + "\n")
    assert (ledger_dir(root) / "../../../victim.txt").resolve() == victim
    result = invoke("stats", "--compact", "--cache-dir", str(root))
    assert result.exit_code == 0, result.output
    assert victim.read_bytes() == b"x" * 22
    assert other.read_bytes() == b"y" * 11
    assert "replaces" in result.stderr


def test_a_symlinked_ledger_folder_is_not_followed_out_of_the_root(tmp_path: Path) -> None:
    """`<root>/.cachetool/ledger` a symlink to a folder elsewhere holding old segments: compaction
    leaves that folder exactly as it was (no segment removed, no compacted segment or lock file
    written) and says why."""
    root = tmp_path / "cache"
    _write_runs(root, 4, 2)
    elsewhere = tmp_path / "elsewhere"
    ledger_dir(root).rename(elsewhere)
    ledger_dir(root).symlink_to(elsewhere, target_is_directory=True)
    files = sorted(os.listdir(elsewhere))
    report = compact_ledger(root, keep_runs=0)
    assert sorted(os.listdir(elsewhere)) == files
    assert report.segments == 0
    assert any("symlink" in w for w in report.warnings), report.warnings


WRITER = textwrap.dedent(
    """
    import socket, sys
    from cachetool.history.writer import LedgerWriter
    root, pid = sys.argv[1], int(sys.argv[2])
    w = LedgerWriter(pid=pid, start=5.0)
    base = {"v": 1, "run": w.run_id, "host": socket.gethostname(), "pid": pid, "root": root}
    def step(i):
        w.append(root, {**base, "type": "transform", "seq": i, "time": 5.0 + i, "result": f"live{i:04d}",
                        "parents": ["source"], "cache": "miss", "operation": "map"})
    for i in range(2):
        step(i)
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(2, 6):
        step(i)
    w.close()
    """
)


@pytest.mark.slow
def test_a_live_writer_whose_pid_looks_dead_keeps_its_segment(tmp_path: Path) -> None:
    """A tracer in another PID namespace (its segment names a pid that is dead here) still
    appending: compaction leaves its segment whole, and every step it records, before and after
    the compaction, is counted by `stats`."""
    root = tmp_path / "cache"
    _write_runs(root, 3, 2)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(DEAD_PID + 77)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        report = compact_ledger(root, keep_runs=0)
        assert report.segments == 3
        assert any(f"-{DEAD_PID + 77}-" in n for n in report.left), report.left
    finally:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    assert ledger_stats(root).total.steps == 3 * 2 + 6


def test_lines_compaction_cannot_read_are_kept(tmp_path: Path) -> None:
    """A record of a type a newer cachetool writes, and a torn last line, in old finished
    segments: after compaction both are still in the ledger folder byte for byte, the report
    warns about them, and the readable runs' totals are unchanged."""
    root = tmp_path / "cache"
    _write_runs(root, 4, 2)
    totals = _totals(root)
    first, second = _segments(root)[:2]
    future = b'{"v":2,"type":"future-thing","time":1.0,"note":"kept"}\n'
    torn = b'{"v":1,"type":"transform","seq":9,"ti'
    with open(ledger_dir(root) / first, "ab") as f:
        f.write(future)
    with open(ledger_dir(root) / second, "ab") as f:
        f.write(torn)
    report = compact_ledger(root, keep_runs=0)
    assert report.warnings, report
    blobs = b"".join((ledger_dir(root) / n).read_bytes() for n in _segments(root))
    assert future in blobs and torn in blobs
    assert _totals(root) == totals


def test_stats_compact_says_why_nothing_was_compacted_and_shows_its_warnings(tmp_path: Path) -> None:
    """`stats --compact` on three runs says "nothing to compact" and why (all among the newest
    kept whole); on a ledger with a segment it leaves whole for an unreadable line, it prints the
    warning, and `--json` carries it in `compaction.warnings`."""
    root = tmp_path / "cache"
    _write_runs(root, 3, 2)
    few = invoke("stats", "--compact", "--cache-dir", str(root))
    assert few.exit_code == 0, few.output
    assert "nothing to compact" in few.output
    assert "3 segment(s), all among the newest 50 kept whole" in few.output
    _write_runs(root, 60, 2, first=3)
    with open(ledger_dir(root) / _segments(root)[0], "ab") as f:
        f.write(b'{"v":2,"type":"future-thing","time":1.0}\n')
    human = invoke("stats", "--compact", "--dry-run", "--cache-dir", str(root))
    assert "left whole: 1 line(s) this cachetool cannot read" in human.stderr + human.output
    doc = json.loads(invoke("stats", "--compact", "--json", "--cache-dir", str(root)).stdout)
    assert any("left whole" in w for w in doc["compaction"]["warnings"]), doc["compaction"]


def test_a_compaction_locks_a_bounded_number_of_segments_and_says_the_rest_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `MAX_REPLACED` old segments (lowered here to 2), one compaction replaces that many
    (each is locked through an open descriptor), warns that the others wait, and the next
    compaction takes them; `stats` totals unchanged throughout."""
    from cachetool.history import compact

    root = tmp_path / "cache"
    _write_runs(root, 5, 2)
    totals = _totals(root)
    monkeypatch.setattr(compact, "MAX_REPLACED", 2)
    first = compact_ledger(root, keep_runs=0)
    assert first.segments == 2
    assert any("3 more old segment(s) wait" in w for w in first.warnings), first.warnings
    assert _totals(root) == totals
    compact_ledger(root, keep_runs=0)
    compact_ledger(root, keep_runs=0)
    assert len(_segments(root)) == 1 and _totals(root) == totals
