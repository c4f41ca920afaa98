"""Compacting a long-lived ledger (`stats --compact`): old runs summarised, what the cache still
holds kept whole with its parents; usage, totals and lineage unchanged; safe while tracers append
and when killed at any point."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from cachetool.cache.roots import ledger_dir
from cachetool.history.compact import KILL_AT_ENV, compact_ledger, ledger_bytes
from cachetool.history.ledger import Ledger, read_ledger
from cachetool.history.ledger_stats import ledger_stats
from cachetool.history.lineage_view import lineage
from cachetool.history.writer import LedgerWriter
from tests.conftest import invoke

#: Above the largest pid Linux hands out (4194304): the writer of such a segment is gone.
DEAD_PID = 4_200_000


@pytest.fixture(autouse=True)
def _user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHETOOL_HOME", str(tmp_path / "cachetool_home"))


def _write_runs(root: Path, runs: int, steps: int, *, first: int = 0, living: int = 0) -> str:
    """`runs` finished runs of a pipeline of `steps` maps from one source, every second step a
    cache hit; the files of the last step of run `living` exist. Returns that fingerprint."""
    host = socket.gethostname()
    for r in range(first, first + runs):
        run_start = 10_000.0 * (r + 1)
        w = LedgerWriter(pid=DEAD_PID + r, start=run_start)
        base = {
            "v": 1,
            "run": w.run_id,
            "host": host,
            "pid": DEAD_PID + r,
            "root": str(root),
            "internal": False,
        }
        w.append(str(root), {**base, "type": "run-start", "seq": 0, "time": run_start, "argv": ["p.py"]})
        parent = "source"
        for s in range(steps):
            fp = f"{r:06d}{s:06d}"
            rec = {
                **base,
                "type": "transform",
                "seq": s + 1,
                "time": run_start + s,
                "duration": 0.5,
                "operation": "map",
                "result": fp,
                "parents": [parent],
                "call_site": {"file": "/work/p.py", "line": 10 + s, "function": "<module>"},
                "files": [{"path": str(root / "ds" / f"cache-{fp}.arrow"), "size": 100, "status": "written"}],
                "cache": "hit" if s % 2 else "miss",
            }
            w.append(str(root), rec)
            parent = fp
        w.append(str(root), {**base, "type": "run-end", "seq": steps + 1, "time": run_start + steps})
        w.close()
    fp = f"{living:06d}{steps - 1:06d}"
    (root / "ds").mkdir(parents=True, exist_ok=True)
    (root / "ds" / f"cache-{fp}.arrow").write_bytes(b"x" * 100)
    return fp


def _segments(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(ledger_dir(root)) if n.endswith(".jsonl"))


def _totals(root: Path) -> dict[str, Any]:
    t = ledger_stats(root).total
    return {
        k: getattr(t, k) for k in ("runs", "steps", "hits", "misses", "partial", "no_file", "bytes_written")
    }


def _usage_of(root: Path, fps: list[str]) -> dict[str, Any]:
    usage = read_ledger(root).usage()
    whole = read_ledger(root).usage()
    assert {fp: usage.get(fp) for fp in fps} == {fp: whole.get(fp) for fp in fps}  # index == records
    return {fp: usage.get(fp) for fp in fps}


def _chain(root: Path, fp: str) -> list[tuple[str, str | None]]:
    return [(s.fingerprint, s.operation) for _, s in lineage(root, fp).steps]


def test_compaction_keeps_usage_totals_and_the_parent_links_of_what_has_files(tmp_path: Path) -> None:
    """`stats --compact` on 30 finished runs: the runs older than the newest 50... here all but
    the newest 5 (`keep_runs=5`) become summaries; the ledger shrinks; `stats` totals, the usage
    of the fingerprint that has files (last use, hits, misses) and its lineage back to the
    source through every summarised run are what they were; `--dry-run` changes nothing; a
    second compaction folds the first one in."""
    root = tmp_path / "cache"
    living = _write_runs(root, 30, 20)
    before = (_totals(root), _usage_of(root, [living]), _chain(root, living), ledger_bytes(root))
    assert len(before[2]) == 20 + 1  # the first run's steps, then the source

    files = _segments(root)
    now = time.time()
    dry = compact_ledger(root, keep_runs=5, dry_run=True, now=now)
    assert dry.dry_run and dry.runs == 25 and dry.bytes_after < dry.bytes_before / 2
    assert _segments(root) == files

    done = compact_ledger(root, keep_runs=5, now=now)  # the same time: the same bytes
    assert (done.runs, done.segments, done.bytes_after) == (25, 25, dry.bytes_after)
    after = (_totals(root), _usage_of(root, [living]), _chain(root, living), ledger_bytes(root))
    assert after[:3] == before[:3]
    assert after[3] == done.bytes_after < before[3] / 2
    assert len(_segments(root)) == 5 + 1  # the runs kept whole, the compacted one

    newest = _write_runs(root, 10, 20, first=30, living=39)  # ten more runs
    again = (_totals(root), _usage_of(root, [living, newest]), _chain(root, newest))
    second = compact_ledger(root, keep_runs=5)
    assert second.segments == 10 + 1  # ten runs, and the first compaction folded in
    assert (_totals(root), _usage_of(root, [living, newest]), _chain(root, newest)) == again
    assert len(_segments(root)) == 5 + 1


def test_stats_compact_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cachetool stats --compact --dry-run` says what it would do and changes nothing;
    `--compact` does it and says so, in human and JSON output; `--dry-run` alone is a usage
    error (exit 2)."""
    root = tmp_path / "cache"
    _write_runs(root, 60, 3)
    files = _segments(root)
    dry = invoke("stats", "--compact", "--dry-run", "--cache-dir", str(root))
    assert dry.exit_code == 0, dry.output
    said = "Would compact the ledger: 10 run(s) summarised (27 records), 3 records kept whole"
    assert dry.output.startswith(said)
    assert _segments(root) == files
    done = invoke("stats", "--compact", "--json", "--cache-dir", str(root))
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert (doc["compaction"]["runs"], doc["compaction"]["dry_run"], doc["runs"], doc["steps"]) == (
        10,
        False,
        60,
        180,
    )
    assert len(_segments(root)) == 50 + 1
    alone = invoke("stats", "--dry-run", "--cache-dir", str(root))
    assert alone.exit_code == 2 and "--compact" in alone.output


def test_fewer_segments_than_the_newest_kept_whole_compacts_nothing(tmp_path: Path) -> None:
    """`cachetool stats --compact` of a ledger of 40 finished runs (fewer than the newest 50 kept
    whole): nothing is summarised, every segment stays, and the output says why."""
    root = tmp_path / "cache"
    _write_runs(root, 40, 3)
    files = _segments(root)
    done = invoke("stats", "--compact", "--json", "--cache-dir", str(root))
    assert done.exit_code == 0, done.output
    compaction = json.loads(done.output)["compaction"]
    assert (compaction["segments"], compaction["runs"], compaction["recent"]) == (0, 0, 40)
    assert _segments(root) == files


def test_compaction_never_writes_a_segment_readers_would_read_only_part_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger whose records to keep whole are larger than the part of a segment readers read
    (256 MB; lowered here to 48 kB): every run's result still has files, so compaction would
    write one segment with all their lineage past that limit, and lineage would lose it. It
    leaves the ledger as it is and says why; the lineage of what has files, the totals and the gc
    records stay whole, and reading warns of nothing."""
    from cachetool.history import ledger

    monkeypatch.setattr(ledger, "MAX_SEGMENT_BYTES", 48 * 1024)
    root = tmp_path / "cache"
    living = _write_runs(root, 30, 20)
    for r in range(30):
        (root / "ds" / f"cache-{r:06d}{19:06d}.arrow").write_bytes(b"x" * 100)
    host = socket.gethostname()
    for k in range(12):  # twelve finished gc runs of 60 removals each, older than every run
        w = LedgerWriter(pid=DEAD_PID + 100 + k, start=1000.0 + k)
        for i in range(60):
            fp = f"{k:04d}{i:012d}"
            w.append(
                str(root),
                {
                    "v": 1,
                    "type": "gc",
                    "seq": i,
                    "run": w.run_id,
                    "time": 1000.0 + k + i / 1000,
                    "host": host,
                    "pid": DEAD_PID + 100 + k,
                    "root": str(root),
                    "action": "removed",
                    "fingerprint": fp,
                    "kind": "derived",
                    "path": str(root / "ds" / f"cache-{fp}.arrow"),
                    "paths": [str(root / "ds" / f"cache-{fp}.arrow")],
                    "size": 100,
                    "files": 1,
                    "reason": "least recently used, cache over 1 GB",
                },
            )
        w.close()
    before = (_totals(root), _chain(root, living), len(read_ledger(root).gc_records()))
    assert before[2] == 720 and not read_ledger(root).warnings

    done = compact_ledger(root, keep_runs=5)
    assert done.segments == 0
    assert any("more than readers read of one segment" in w for w in done.warnings), done.warnings
    assert (_totals(root), _chain(root, living), len(read_ledger(root).gc_records())) == before
    assert not read_ledger(root).warnings


APPENDER = textwrap.dedent(
    """\
    import socket, sys, time
    from cachetool.history.writer import LedgerWriter
    root, worker, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    w = LedgerWriter()
    base = {"v": 1, "run": w.run_id, "host": socket.gethostname(), "pid": w.pid, "internal": False}
    for i in range(n):
        cache = "hit" if i % 3 else "miss"
        w.append(root, {**base, "type": "transform", "seq": i, "time": time.time(), "duration": 0.0,
                        "result": f"w{worker:03d}-{i:06d}", "parents": [], "cache": cache,
                        "files": [{"path": "/gone/x", "size": 7, "status": "written"}]})
        time.sleep(0.01)  # a pipeline's steps take time: compactions run in between
    w.append(root, {**base, "type": "run-end", "seq": n, "time": time.time()})
    """
)

#: Compacts again and again until `stop` exists; after each compaction that replaced segments it
#: writes to `counts` how many did, and how many of those left a live writer's segment whole.
COMPACTOR = textwrap.dedent(
    """\
    import os, sys, time
    from cachetool.history.compact import compact_ledger
    root, stop, counts = sys.argv[1:4]
    did = beside = 0
    while not os.path.exists(stop):
        report = compact_ledger(root, keep_runs=0)
        if report.segments:
            did += 1
            beside += bool(report.left)
            with open(counts + ".tmp", "w") as f:
                f.write(f"{did} {beside}")
            os.replace(counts + ".tmp", counts)
    compact_ledger(root, keep_runs=0)
    """
)


@pytest.mark.slow
def test_compaction_while_tracers_append_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """Processes append records (each to its own segment, as tracers do; short runs that end
    while others go on) while two other processes compact the ledger again and again: every
    record is counted once afterwards, by `stats` and by the ledger's usage, whether it was kept,
    summarised, or appended after a compaction read its segment. Waves of three writers run (two
    at least, up to six) until compactions replaced segments 3 times, twice while a live
    writer's segment was left whole beside them."""
    root = tmp_path / "cache"
    root.mkdir()
    stop = tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    counts = [tmp_path / f"counts{c}" for c in range(2)]
    compactors = [
        subprocess.Popen([sys.executable, "-c", COMPACTOR, str(root), str(stop), str(c)], env=env)
        for c in counts
    ]

    def windows() -> tuple[int, int]:
        done = [tuple(map(int, c.read_text().split())) for c in counts if c.exists()]
        return sum(d for d, _ in done), sum(b for _, b in done)

    expected = {"steps": 0, "hits": 0, "misses": 0}
    waves = 0
    try:
        while waves < 2 or (waves < 6 and not (windows()[0] >= 3 and windows()[1] >= 2)):
            writers = []
            for k in range(3):
                worker, n = waves * 3 + k, 30 + 20 * k
                expected["steps"] += n
                expected["hits"] += sum(1 for i in range(n) if i % 3)
                expected["misses"] += sum(1 for i in range(n) if not i % 3)
                writers.append(
                    subprocess.Popen(
                        [sys.executable, "-c", APPENDER, str(root), str(worker), str(n)], env=env
                    )
                )
            for p in writers:
                assert p.wait(timeout=120) == 0
            waves += 1
    finally:
        stop.touch()
        for p in compactors:
            assert p.wait(timeout=120) == 0
    did, beside = windows()
    print(f"{waves} waves: {did} compactions replaced segments, {beside} beside a live writer")
    assert did >= 3 and beside >= 2, (did, beside)
    got = ledger_stats(root).total
    assert {"steps": got.steps, "hits": got.hits, "misses": got.misses} == expected
    usage = read_ledger(root).usage()
    assert sum(u.records for u in usage.values()) == 0  # no file survives: usage of none kept
    assert not [n for n in os.listdir(ledger_dir(root)) if n.endswith(".tmp")]
    assert len(_segments(root)) == 1  # everything finished: one compacted segment


KILLED = "import sys; from cachetool.history.compact import compact_ledger as c; c(sys.argv[1], keep_runs=5)"


@pytest.mark.slow
def test_a_compaction_killed_at_any_point_loses_nothing(tmp_path: Path) -> None:
    """A compaction SIGKILLed at many points (at delays across its run; and, through its kill-point
    test hook, right after it wrote the compacted segment under its temporary name and right
    after it renamed it into place, each window asserted reached): after each kill `stats`
    totals, the usage of the fingerprint that has files and its lineage back to the source are
    what they were, nothing is counted twice, and the next compaction finishes and removes what
    the killed one left."""
    root = tmp_path / "cache"
    living = _write_runs(root, 100, 10)
    reference = (_totals(root), _usage_of(root, [living]), _chain(root, living))
    pristine = tmp_path / "pristine"
    shutil.copytree(ledger_dir(root), pristine)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    folder = ledger_dir(root)

    def restore() -> None:
        shutil.rmtree(folder)
        shutil.copytree(pristine, folder)

    start = time.monotonic()
    assert subprocess.run([sys.executable, "-c", KILLED, str(root)], env=env, timeout=300).returncode == 0
    whole = time.monotonic() - start
    assert (_totals(root), _usage_of(root, [living]), _chain(root, living)) == reference
    rounds = int(os.environ.get("CACHETOOL_KILL_ROUNDS", "1"))  # more by hand: a longer soak
    plans: list[tuple[str, float]] = [("delay", whole * k / 5) for k in range(1, 5)] * rounds
    plans += [("written", 0.0), ("renamed", 0.0)] * rounds
    for how, delay in plans:
        restore()
        hook = {} if how == "delay" else {KILL_AT_ENV: how}
        proc = subprocess.Popen([sys.executable, "-c", KILLED, str(root)], env={**env, **hook})
        if how == "delay":
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        else:  # it kills itself at that point: the window is reached
            assert proc.wait(timeout=300) == -signal.SIGKILL, how
            names = os.listdir(folder)
            if how == "written":  # the compacted segment written under its temporary name only
                assert any(n.startswith(".compact-") for n in names), names
                assert not any(n.startswith("compacted-") for n in names), names
            else:  # renamed into place, every replaced segment still there
                assert any(n.startswith("compacted-") for n in names), names
                assert len(_segments(root)) == 100 + 1
        state = (_totals(root), _usage_of(root, [living]), _chain(root, living))
        assert state == reference, (how, delay)
        compact_ledger(root, keep_runs=5)
        assert (_totals(root), _usage_of(root, [living]), _chain(root, living)) == reference, (how, delay)
        assert not [n for n in os.listdir(folder) if n.endswith(".tmp")]
        assert len(_segments(root)) == 5 + 1


def test_a_gc_that_removed_something_compacts_a_large_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gc` compacts the ledger after a removal once its segments pass `AUTO_BYTES` (lowered here):
    a dry run leaves it as it is and says it would (human and `--json`), a gc that removed a file
    compacts it and says so; stats totals unchanged."""
    import pyarrow as pa

    from cachetool.history import writer
    from cachetool.maintenance.gc import gc_cache

    root = tmp_path / "cache"
    _write_runs(root, 60, 3)
    totals = _totals(root)
    path = root / "ds" / "cache-00000000000000aa.arrow"
    schema = pa.schema([("a", pa.int64())])
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, schema) as w:
        w.write_batch(pa.record_batch([pa.array([1])], schema=schema))
    os.utime(path, (1e9, 1e9))
    monkeypatch.setattr(writer, "AUTO_BYTES", 1000)
    dry = gc_cache(root, ["00000000000000aa"], min_age=0, dry_run=True)
    assert dry.compaction is not None and dry.compaction.dry_run and dry.compaction.runs == 10
    shown = invoke("gc", "00000000000000aa", "--min-age", "0", "--dry-run", "--cache-dir", str(root))
    assert "Would compact the ledger: 10 run(s) summarised" in shown.output
    doc = json.loads(
        invoke(
            "gc", "00000000000000aa", "--min-age", "0", "--dry-run", "--json", "--cache-dir", str(root)
        ).stdout
    )
    assert doc["compaction"]["runs"] == 10 and doc["compaction"]["dry_run"]
    assert not [n for n in _segments(root) if n.startswith("compacted-")]
    done = invoke("gc", "00000000000000aa", "--min-age", "0", "--yes", "--cache-dir", str(root))
    assert done.exit_code == 0, done.output
    assert "Compacted the ledger: " in done.output and "(over 1.0 kB)" in done.output
    assert not path.exists()
    assert [n for n in _segments(root) if n.startswith("compacted-")]
    assert _totals(root) == totals


def test_explain_after_a_compaction_still_knows_the_earlier_runs(tmp_path: Path) -> None:
    """A step at a new call site in the newest run is "the first time this step ran", not "the
    first run recorded in this cache", before and after the earlier runs were summarised; its
    explanation through the index is the one from every record, both times."""
    from cachetool.history.explain.explainer import explain_fingerprint

    root = tmp_path / "cache"
    _write_runs(root, 8, 3)
    shutil.rmtree(root / "ds")  # no file left: no record of those runs is kept whole
    w = LedgerWriter(pid=DEAD_PID + 99, start=500_000.0)
    base = {"v": 1, "run": w.run_id, "host": socket.gethostname(), "pid": DEAD_PID + 99, "internal": False}
    site = {"file": "/work/p.py", "line": 99, "function": "<module>"}
    new = {**base, "type": "transform", "seq": 1, "time": 500_000.0, "result": "new", "parents": ["source"]}
    w.append(str(root), {**new, "operation": "filter", "call_site": site, "cache": "miss"})
    w.close()

    def said() -> list[Any]:
        whole = explain_fingerprint(root, "new", view=Ledger.load(root).view).to_json()
        assert explain_fingerprint(root, "new").to_json() == whole
        return [r["message"] for s in whole["steps"] for r in s["reasons"]]

    before = said()
    assert before == ["first time this step ran (nothing recorded to compare with)"]
    assert compact_ledger(root, keep_runs=1).runs == 8  # only the newest run stays whole
    assert said() == before


#: A cache cleaned every day: `days` gc runs from `first` on, each removing the 20 leftovers a
#: killed run left in the dataset folder; the first of all also evicts the entry named in argv.
GC_DAILY = textwrap.dedent(
    """\
    import os, sys
    from pathlib import Path
    from cachetool.maintenance.gc import gc_cache
    import pyarrow as pa
    root, days, first, evict = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    folder = root / "csv" / "default-0123456789abcdef" / "0.0.0" / "0123456789abcdef"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset_info.json").write_text('{"splits": {"train": {"name": "train"}}}')
    schema = pa.schema([("a", pa.int64())])
    with pa.OSFile(str(folder / "csv-train.arrow"), "wb") as f, pa.ipc.new_stream(f, schema) as w:
        w.write_batch(pa.record_batch([pa.array([1])], schema=schema))
    stream = (folder / "csv-train.arrow").read_bytes()  # a killed writer's: an Arrow stream
    for d in range(first, first + days):
        for i in range(20):
            p = folder / f"tmp{d:04d}{i:04d}"
            p.write_bytes(stream)
            p.chmod(0o600)  # as datasets' NamedTemporaryFile makes it
            os.utime(p, (1e9, 1e9))
        gc_cache(root, evict if d == 0 else (), temp=True, tmp_dir=folder, min_age=0, yes=True)
    """
)


@pytest.mark.slow
def test_gc_history_is_compacted_so_a_cache_cleaned_every_day_keeps_a_bounded_ledger(tmp_path: Path) -> None:
    """Every gc run adds a record per removed item. Compaction folds the old ones into a count,
    keeping whole only what a command still reads: twice as many days of gc leave a compacted
    ledger of the same size, not twice the size. What `lineage` and `verify` need stays: an
    evicted ancestor of a living entry is still "deleted by gc", and verify does not call its
    recorded file missing."""
    import pyarrow as pa

    from cachetool.maintenance.verify import verify_cache

    root = tmp_path / "cache"
    living = _write_runs(root, 10, 3)  # run 0's last step has files; its parent is evicted below
    parent = "000000000001"
    path = root / "ds" / f"cache-{parent}.arrow"
    schema = pa.schema([("a", pa.int64())])
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, schema) as w:
        w.write_batch(pa.record_batch([pa.array([1])], schema=schema))
    os.utime(path, (1e9, 1e9))

    def days(n: int, first: int) -> None:
        args = [sys.executable, "-c", GC_DAILY, str(root), str(n), str(first), parent]
        subprocess.run(args, check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})

    def deleted() -> str | None:
        return next(s.deleted for _, s in lineage(root, living).steps if s.fingerprint == parent)

    def missing() -> list[str]:
        return [str(f.path) for f in verify_cache(root).findings if parent in str(f.path)]

    days(6, 0)
    assert not path.exists() and len(read_ledger(root).gc_records()) == 6 * 20 + 1
    assert deleted() and not missing()
    first = compact_ledger(root, keep_runs=3)
    assert first.segments > 0 and first.gc_folded >= 3 * 20
    size = ledger_bytes(root)

    days(6, 6)
    grown = ledger_bytes(root)
    second = compact_ledger(root, keep_runs=3)
    assert second.segments > 0 and first.gc_folded + 6 * 20 <= second.gc_folded <= 9 * 20
    assert ledger_bytes(root) < size + 2048 < grown, (size, grown, ledger_bytes(root))
    assert len(read_ledger(root).gc_records()) <= 3 * 20 + 1  # the newest runs whole, the eviction kept
    assert deleted() and not missing()
    assert _totals(root)["runs"] == 10


@pytest.mark.slow
def test_a_traced_run_that_ends_compacts_a_long_ledger_so_reading_it_stays_cheap(tmp_path: Path) -> None:
    """A cache whose ledger grew past `AUTO_BYTES` of old runs (beyond the newest kept whole) is
    compacted by the next `cachetool run` as it ends, with no `gc` or `stats --compact`: the old
    runs summarised, the ledger a fraction of its size, the runs counted and the lineage of what
    the cache holds unchanged."""
    from cachetool.history.writer import AUTO_BYTES, foldable_bytes
    from tests.conftest import cachetool_run, hf_env

    root = tmp_path / "cache"
    # What the runs below count and the lineage of what the cache holds, read from the same
    # newest runs without the ten old ones (which hold no step of that lineage): reading the
    # 20 MB ledger before compacting it would only take seconds to give the same.
    without_old = tmp_path / "without-old"
    newest = _write_runs(without_old, 50, 3)
    runs, chain = _totals(without_old)["runs"] + 10, _chain(without_old, newest)
    host = socket.gethostname()
    for r in range(10):  # ten old runs of many steps: about 2 MB each
        w = LedgerWriter(pid=DEAD_PID + 1000 + r, start=100.0 + r)
        base = {"v": 1, "run": w.run_id, "host": host, "pid": DEAD_PID + 1000 + r, "root": str(root)}
        w.append(str(root), {**base, "type": "run-start", "seq": 0, "time": 100.0 + r, "argv": ["old.py"]})
        for s in range(1, 2_200):
            rec = {**base, "type": "transform", "seq": s, "time": 100.0 + r, "operation": "map"}
            w.append(
                str(root), {**rec, "result": f"{r:04d}{s:012d}", "parents": ["source"], "note": "x" * 800}
            )
        w.append(str(root), {**base, "type": "run-end", "seq": 2_200, "time": 101.0 + r})
        w.close()
    old = set(_segments(root))
    living = _write_runs(root, 50, 3)  # the newest 50, kept whole by compaction
    assert living == newest
    for i, name in enumerate(sorted(_segments(root), key=lambda n: (n not in old, n))):
        os.utime(ledger_dir(root) / name, (1_000.0 + i, 1_000.0 + i))  # written in that order
    assert foldable_bytes(root) > AUTO_BYTES
    size = ledger_bytes(root)

    (tmp_path / "d.csv").write_text("a\n1\n2\n3\n")
    script = tmp_path / "p.py"
    script.write_text(
        "from datasets import load_dataset\n"
        "load_dataset('csv', data_files='d.csv', split='train').map(lambda x: {'b': x['a'] * 2})\n"
    )
    cachetool_run(script, env=hf_env(tmp_path), cwd=tmp_path, warm=True)

    assert [n for n in _segments(root) if n.startswith("compacted-")], _segments(root)
    assert foldable_bytes(root) <= AUTO_BYTES and ledger_bytes(root) < size / 4
    assert _totals(root)["runs"] == runs + 1
    assert _chain(root, living) == chain
