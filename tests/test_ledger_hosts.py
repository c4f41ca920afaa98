"""The ledger of a cache several hosts share: concurrent computations and where a step ran.

Records are built from the documented schema (what `cachetool run` writes, one line each), so
the rules are checked on exact times; tests/test_hosts.py runs the real thing across namespaces."""

from __future__ import annotations

import time
from typing import Any

from cachetool.history.graph import where_sentence
from cachetool.history.ledger_stats import concurrent_computations
from cachetool.history.records.steps import StepRecord


def step(run: str, start: float, duration: float, cache: str = "miss", fp: str = "7f3a1b2c9d0e1f20") -> Any:
    host, pid = run.rsplit("-", 2)[0], int(run.rsplit("-", 2)[1])
    return StepRecord.parse(
        {
            "v": 1,
            "type": "transform",
            "seq": 1,
            "run": run,
            "time": start,
            "duration": duration,
            "host": host,
            "pid": pid,
            "operation": "map",
            "result": fp,
            "parents": ["0e90cea102c10b11"],
            "cache": cache,
        }
    )


def test_two_runs_computing_one_fingerprint_at_once_lose_all_but_the_longest() -> None:
    """Overlapping computations of one fingerprint by different runs are one finding; the time
    lost is every computation but the longest. Runs one after the other, a run repeating its own
    step, hits, and another fingerprint are not concurrent."""
    recs = [
        step("node-3-11-1", 100.0, 660.0),
        step("node-7-22-1", 400.0, 600.0),  # overlaps node-3's
        step("node-9-33-1", 2000.0, 300.0),  # after both: not concurrent
        step("node-9-33-1", 2400.0, 300.0),  # the same run again: not concurrent
        step("node-5-44-1", 500.0, 10.0, cache="hit"),  # loaded, not computed
        step("node-5-44-1", 150.0, 100.0, fp="another"),  # one run only
    ]
    (dup,) = concurrent_computations(recs)
    assert (dup.fingerprint, dup.runs, dup.hosts, dup.lost_seconds) == (
        "7f3a1b2c9d0e1f20",
        2,
        ("node-3", "node-7"),
        600.0,
    )
    assert dup.sentence() == "2 runs computed 7f3a1b2c… concurrently (node-3, node-7); 10.0 min lost"
    three = concurrent_computations([*recs, step("node-8-55-1", 700.0, 120.0)])
    assert [(d.runs, d.lost_seconds) for d in three] == [(3, 720.0)]


def test_the_time_lost_to_a_concurrent_run_reads_as_stats_prints_its_total() -> None:
    """A second run that lost 1.5 s says "1.5 s lost" (as the `Lost to concurrent runs` row says
    1.5 s), not "a second lost"."""
    (dup,) = concurrent_computations([step("vm-1-1", 100.0, 3.0), step("vm-2-1", 100.5, 1.5)])
    assert dup.sentence().endswith("; 1.5 s lost")


def test_a_short_concurrent_computation_says_its_minute_once() -> None:
    """`explain` of a step another run computed at the same time gives the clock once and the
    duration when both ends fall in the same minute ("at 15:17, for 1.5 s", never "from 15:17 to
    15:17"); the two clock times when they do not."""
    from cachetool.formatting import clock_time
    from cachetool.history.explain.reasons import concurrent_reason

    minute = time.time() // 3600 * 3600 + 60  # a minute's start, in every time zone
    hhmm = [clock_time(minute + m * 60) for m in (0, 1)]
    short = step("vm-1-1", minute + 5.0, 1.5)
    assert f"(at {hhmm[0]}, for 1.5 s)" in concurrent_reason(step("vm-2-1", minute + 5.5, 1.0), short).text
    long = step("vm-1-1", minute + 50.0, 30.0)
    assert (
        f"(from {hhmm[0]} to {hhmm[1]})" in concurrent_reason(step("vm-2-1", minute + 55.0, 1.0), long).text
    )


def test_where_is_said_only_when_more_than_one_host_ran_a_step() -> None:
    assert where_sentence([step("vm-1-1", 0, 1), step("vm-2-1", 5, 1, cache="hit")]) is None
    assert (
        where_sentence([step("node-3-1-1", 0, 1), step("node-7-2-1", 5, 1, cache="hit")])
        == "computed on node-3, loaded on node-7"
    )
