"""`cachetool stats`: counts from a ledger with known records, and from two real runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

try:  # tests/ may or may not be a package
    from tests.conftest import invoke
    from tests.explain_pipeline import ExplainRuns, shared_explain_runs
except ImportError:
    from conftest import invoke  # type: ignore[no-redef]
    from explain_pipeline import ExplainRuns, shared_explain_runs  # type: ignore[no-redef]

from cachetool.cli.app import app
from cachetool.history.ledger_stats import Counts, RandomReason, ledger_stats, zero_stats, zeroed_at
from cachetool.history.writer import LedgerWriter

T0 = 1_700_000_000.0
DAY = 86400.0


def record(root: Path, **fields: Any) -> dict[str, Any]:
    """A step record as the tracer writes it (the fields stats reads, and a few more)."""
    rec: dict[str, Any] = {
        "v": 1,
        "type": "transform",
        "seq": 0,
        "operation": "map",
        "internal": False,
        "parents": ["p0"],
        "call_site": {"file": "/work/pipe.py", "line": 10, "function": "<module>"},
        "function": {"qualname": "f"},
        "random_fallback": None,
        "files": [],
        "cache": "none",
        "root": str(root),
        "duration": 0.0,
    }
    rec.update(fields)
    return rec


def data_file(root: Path, fp: str, size: int, status: str) -> dict[str, Any]:
    return {
        "path": str(root / "csv" / "default-1" / "0.0.0" / "abc" / f"cache-{fp}.arrow"),
        "size": size,
        "status": status,
    }


@pytest.fixture
def known(tmp_path: Path, isolated_env: Path) -> Path:
    """Three runs of a two-step pipeline: run A computes both steps, run B hits both, run C
    recomputes step 1 (2.5 s lost) with a random fingerprint and makes an in-memory step; an
    internal call is there too."""
    root = tmp_path / "cache"
    root.mkdir()
    site1 = {"file": "/work/pipe.py", "line": 10, "function": "<module>"}
    site2 = {"file": "/work/pipe.py", "line": 11, "function": "<module>"}
    runs = {
        "A": [
            record(
                root,
                time=T0,
                result="a1",
                call_site=site1,
                cache="miss",
                duration=3.0,
                files=[data_file(root, "a1", 1000, "written")],
            ),
            record(
                root,
                time=T0 + 1,
                result="a2",
                call_site=site2,
                cache="miss",
                duration=1.0,
                files=[data_file(root, "a2", 500, "written")],
            ),
        ],
        "B": [
            record(
                root,
                time=T0 + DAY,
                result="a1",
                call_site=site1,
                cache="hit",
                duration=0.01,
                files=[data_file(root, "a1", 1000, "reused")],
            ),
            record(
                root,
                time=T0 + DAY + 1,
                result="a2",
                call_site=site2,
                cache="hit",
                duration=0.01,
                files=[data_file(root, "a2", 500, "reused")],
            ),
        ],
        "C": [
            record(
                root,
                time=T0 + 3 * DAY,
                result="c1",
                call_site=site1,
                cache="miss",
                duration=2.5,
                files=[data_file(root, "c1", 2000, "written")],
                random_fallback={
                    "argument": "fn_kwargs",
                    "error": "cannot pickle 'generator' object",
                    "error_type": "TypeError",
                },
            ),
            record(root, time=T0 + 3 * DAY + 1, result="m1", call_site=site2, cache="none", in_memory=True),
            record(root, time=T0 + 3 * DAY + 2, result="x", internal=True, cache="miss", duration=9.0),
        ],
    }
    for i, recs in enumerate(runs.values()):
        writer = LedgerWriter(host="host", pid=100 + i, start=recs[0]["time"])
        for seq, rec in enumerate(recs):
            writer.append(str(root), {**rec, "run": writer.run_id, "seq": seq})
        writer.close()
    return root


def test_totals_per_call_site_and_per_dataset_on_a_known_ledger(known: Path) -> None:
    """Internal calls are not counted; a repeated call site's miss is recompute time; the written
    bytes are only the files a step wrote."""
    r = ledger_stats(known, now=T0 + 4 * DAY)
    assert r.total == Counts(
        steps=6,
        hits=2,
        misses=3,
        partial=0,
        no_file=1,
        runs=3,
        miss_seconds=6.5,
        recompute_seconds=2.5,
        bytes_written=3500,
        uncached=1,  # the map of an in-memory dataset (pipe.py:11) runs again in every run
    )
    assert r.total.hit_rate == pytest.approx(0.4)
    assert r.random_count == 1
    assert r.random == (RandomReason("fn_kwargs", "TypeError: cannot pickle 'generator' object", 1),)
    sites = {g.key: g.counts for g in r.call_sites}
    assert sites["pipe.py:10 map"] == Counts(
        steps=3, hits=1, misses=2, runs=3, miss_seconds=5.5, recompute_seconds=2.5, bytes_written=3000
    )
    assert sites["pipe.py:11 map"].hits == 1 and sites["pipe.py:11 map"].no_file == 1
    assert [g.key for g in r.datasets] == ["csv/default-1", "(in memory)"]


def test_since_and_zero_start_a_new_period_without_deleting_records(known: Path) -> None:
    assert ledger_stats(known, since=T0 + 2 * DAY, now=T0 + 4 * DAY).total.steps == 2
    assert zeroed_at(known) is None
    zero_stats(known, now=T0 + DAY + 10)
    assert zeroed_at(known) == T0 + DAY + 10
    after = ledger_stats(known, now=T0 + 4 * DAY)
    assert (after.start, after.total.steps, after.total.runs) == (T0 + DAY + 10, 2, 1)
    # Recompute time still knows the earlier runs: step 1 ran before the period began.
    assert after.total.recompute_seconds == 2.5
    assert ledger_stats(known, all_=True, now=T0 + 4 * DAY).total.steps == 6


def test_cli_stats_json_and_zero(known: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["stats", "--json", "--cache-dir", str(known)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["steps"], doc["hits"], doc["misses"], doc["bytes_written"]) == (6, 2, 3, 3500)
    assert doc["random_fingerprints"]["count"] == 1
    assert {"version", "root", "period", "call_sites", "datasets", "hit_rate", "recompute_seconds"} <= set(
        doc
    )
    # Times are UTC ISO 8601 in every document, as `modified` and `used` are in `ls --json`.
    assert doc["period"]["start"] is None and doc["period"]["zeroed_at"] is None
    assert doc["period"]["end"].endswith("+00:00") and "T" in doc["period"]["end"], doc["period"]
    human = runner.invoke(app, ["stats", "--cache-dir", str(known)], env={"COLUMNS": "120"})
    assert human.exit_code == 0 and "Per call site" in human.stdout and "40.0 %" in human.stdout
    zeroed = runner.invoke(app, ["stats", "--zero", "--cache-dir", str(known)])
    assert zeroed.exit_code == 0 and zeroed.stdout.startswith("Statistics zeroed at")
    assert json.loads(runner.invoke(app, ["stats", "--json", "--cache-dir", str(known)]).stdout)["steps"] == 0
    bad = runner.invoke(app, ["stats", "--since", "soon", "--cache-dir", str(known)])
    assert bad.exit_code == 2


@pytest.mark.slow
def test_stats_of_two_real_runs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 1 computes 14 steps (two csv sources and twelve maps and filters); run 2 reuses 5 and
    recomputes 9; the unhashable argument gives a random fingerprint in both."""
    runs: ExplainRuns = shared_explain_runs(tmp_path_factory)
    monkeypatch.setenv("CACHETOOL_HOME", runs.env["CACHETOOL_HOME"])
    r = ledger_stats(runs.cache)
    assert (r.total.runs, r.total.steps, r.total.hits, r.total.misses) == (2, 28, 5, 23)
    assert r.random_count == 2 and r.random[0].argument == "fn_kwargs"
    assert r.total.bytes_written > 0 and r.total.recompute_seconds > 0
    threshold = next(g for g in r.call_sites if g.function == "keep")
    assert (threshold.counts.hits, threshold.counts.misses) == (0, 2)


@pytest.mark.slow
def test_a_step_that_failed_before_is_not_time_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A map whose function raised in the first run computed nothing a later run could reuse:
    when the fixed pipeline computes it, that is a miss, not time lost to recomputation."""
    from tests.test_cmd_explain import fail_then_fix

    fail_then_fix(tmp_path, monkeypatch, "ab\n" * 50)
    (site,) = [g for g in ledger_stats(tmp_path / "cache").call_sites if g.operation == "map"]
    assert (site.counts.misses, site.counts.recompute_seconds) == (1, 0.0), site.counts
    # The failed run is counted as failed, not as a step that wrote no cache file.
    assert (site.counts.failed, site.counts.no_file) == (1, 0), site.counts
    human = invoke("stats", "--cache-dir", str(tmp_path / "cache")).stdout
    assert (
        "Steps that failed                 1" in human and "Steps without a cache file        0" in human
    ), human


@pytest.mark.slow
def test_hours_recomputed_because_of_nondeterminism_per_culprit_and_call_site(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of run 2's recomputed steps, those whose call site and input had an earlier result under
    another fingerprint for a reason explain calls nondeterministic (the set literal of `tag`,
    the generator argument of `random`) are counted per culprit and per call site, with their
    wall and CPU time; the changed argument of `threshold` and `writer_batch_size` are not."""
    runs: ExplainRuns = shared_explain_runs(tmp_path_factory)
    monkeypatch.setenv("CACHETOOL_HOME", runs.env["CACHETOOL_HOME"])
    nd = ledger_stats(runs.cache).nondeterminism
    sites = {(g.operation, g.line) for g in nd.call_sites}
    assert sites == {("map", runs.line('fps["tag"]')), ("map", runs.line('fps["random"]'))}, nd
    culprits = {(c.kind, c.key) for c in nd.culprits}
    assert ("random", "fn_kwargs['model']") in culprits and len(culprits) == 2, culprits
    assert any(k == "nondeterministic" and c.startswith("function → code") for k, c in culprits)
    assert nd.total.steps == 2 and nd.total.seconds > 0 and nd.total.cpu_seconds > 0
    assert nd.total.seconds == pytest.approx(sum(c.hours.seconds for c in nd.culprits))
    doc = json.loads(CliRunner().invoke(app, ["stats", "--json", "--cache-dir", str(runs.cache)]).stdout)
    assert doc["nondeterminism"]["steps"] == 2
    assert {c["culprit"] for c in doc["nondeterminism"]["culprits"]} == {c for _, c in culprits}
    human = CliRunner().invoke(app, ["stats", "--cache-dir", str(runs.cache)], env={"COLUMNS": "150"})
    assert "Recomputed for nondeterminism" in human.stdout and "fn_kwargs['model']" in human.stdout


def test_hours_given_back_by_resume_and_rekey(tmp_path: Path, isolated_env: Path) -> None:
    """A resumed map gives back the time its reused rows would have taken at the rate it computed
    the rest; a re-keyed step (a `rekeyed` part on its record) gives back the compute time of the
    earlier result of its call site and input, less its own time. Records without compute times
    (older ledgers) still read, their duration standing for the wall time."""
    root = tmp_path / "cache"
    root.mkdir()
    site = {"file": "/work/pipe.py", "line": 10, "function": "<module>"}
    files = [data_file(root, "r1", 1000, "written")]
    runs = [
        # An old ledger's record: no "compute" part.
        [record(root, time=T0, result="a1", call_site=site, cache="miss", duration=40.0, files=files)],
        [
            record(
                root,
                time=T0 + DAY,
                result="r1",
                call_site=site,
                cache="miss",
                duration=10.0,
                files=files,
                compute={"wall": 10.0, "cpu": 30.0},
                resumed={"rows": 60, "of": 100, "run": "killed-run"},
            )
        ],
        [
            record(
                root,
                time=T0 + 2 * DAY,
                result="k1",
                call_site=site,
                cache="miss",
                duration=1.5,
                files=files,
                compute={"wall": 1.5, "cpu": 1.5},
                rekeyed={"source": "r1", "run": "r1-run", "batches": 8, "rows": 8000},
            )
        ],
    ]
    for i, recs in enumerate(runs):
        writer = LedgerWriter(host="host", pid=100 + i, start=recs[0]["time"])
        for seq, rec in enumerate(recs):
            writer.append(str(root), {**rec, "run": writer.run_id, "seq": seq})
        writer.close()
    back = ledger_stats(root, now=T0 + 3 * DAY).given_back
    assert (back.resume.steps, back.resume.rows, back.resume.seconds) == (1, 60, pytest.approx(15.0))
    assert (back.rekey.steps, back.rekey.seconds) == (1, pytest.approx(10.0 - 1.5))
    assert back.seconds == pytest.approx(23.5)
    # The window: only the re-keyed step's run is in the last day and a half.
    recent = ledger_stats(root, since="36h", now=T0 + 3 * DAY).given_back
    assert (recent.resume.steps, recent.rekey.steps) == (0, 1)
    doc = json.loads(CliRunner().invoke(app, ["stats", "--json", "--cache-dir", str(root)]).stdout)
    assert doc["given_back"]["resume"] == {"steps": 1, "rows": 60, "seconds": 15.0}
    human = CliRunner().invoke(app, ["stats", "--cache-dir", str(root)], env={"COLUMNS": "120"}).stdout
    assert "Given back by resume" in human and "Given back by re-key" in human


@pytest.mark.parametrize("since", ["7d", "12h", "30m", "2w"])
def test_since_takes_a_duration_in_python_too(known: Path, since: str) -> None:
    assert ledger_stats(known, since=since).start is not None


def test_a_bad_since_is_a_one_line_usage_error(known: Path) -> None:
    from cachetool.errors import CachetoolError

    with pytest.raises(CachetoolError, match="--since"):
        ledger_stats(known, since="soon")
    proc = invoke("stats", "--since", "7 days", "--cache-dir", str(known))
    assert proc.exit_code == 2 and proc.stderr.startswith("Error:"), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    said = invoke("stats", "--since", "soon", "--cache-dir", str(known)).stderr
    assert said.startswith(
        "Error: invalid --since 'soon': 'soon' is not a duration: give a number and a unit"
    )


def test_a_period_with_no_run_does_not_say_to_use_cachetool_run(known: Path) -> None:
    """`stats --since 1d` on a cache whose runs are all older, or `stats` right after `--zero`:
    the hint says the period is empty and how to count the earlier runs, not that statistics
    need `cachetool run` (they were recorded by it)."""
    since = invoke("stats", "--since", "1d", "--cache-dir", str(known))
    assert since.exit_code == 0 and "cachetool run pipeline.py" not in since.stderr, since.stderr
    assert "no step recorded since" in since.stderr and "--since" in since.stderr, since.stderr
    assert invoke("stats", "--zero", "--cache-dir", str(known)).exit_code == 0
    zeroed = invoke("stats", "--cache-dir", str(known))
    assert "cachetool run pipeline.py" not in zeroed.stderr and "--all" in zeroed.stderr, zeroed.stderr
