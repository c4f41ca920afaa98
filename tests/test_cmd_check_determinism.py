"""`cachetool check-determinism`: alignment and causes (pure), the runner on small scripts, the CLI,
and the corpus of real `datasets` pipelines in tests/corpus with known culprits and look-alikes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cachetool.cli.app import app
from cachetool.determinism.analysis import analyze
from cachetool.determinism.check import check_determinism
from cachetool.determinism.verdict import (
    DeterminismReport,
    cause_lines,
    github_lines,
    human_lines,
    load_events,
)
from cachetool.errors import ExitCode
from tests.conftest import hf_env
from tests.corpus_pipeline import causes_of, controls_report, events_of, once, shared_reports

CORPUS = Path(__file__).parent / "corpus"


def clean_env(base: Path) -> dict[str, str]:
    """An environment whose datasets cache and temp dir live in `base`, with no network."""
    return hf_env(base)


# --- alignment and causes, on hand-written events ----------------------------------------------


def ev(op: str, line: int, result: str, parents: list[str], **kw: Any) -> dict[str, Any]:
    event = {
        "v": 1,
        "type": kw.pop("type", "transform"),
        "seq": kw.pop("seq", line),
        "operation": op,
        "transform": f"datasets.arrow_dataset.Dataset.{op}",
        "result": result,
        "parents": parents,
        "internal": kw.pop("internal", False),
        "call_site": {"file": "/p/pipe.py", "line": line, "function": "<module>"},
        "function": None,
        "args": kw.pop("args", {}),
        "random_fallback": kw.pop("random_fallback", None),
    }
    event.update(kw)
    return event


def arg(digest: str | None, tree: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"digest": digest, "repr": "x", "tree": tree}


def leaf(digest: str, r: str, t: str = "int") -> dict[str, Any]:
    return {"l": "", "t": t, "s": t, "r": r, "d": digest}


def test_first_difference_with_equal_parents_is_the_cause_and_the_rest_its_cascade() -> None:
    """A map whose argument differs is the cause; two later steps are its cascade."""
    run_a = [
        ev("from_dict", 1, "root", [], type="root"),
        ev("map", 2, "m1", ["root"], args={"fn_kwargs": arg("k1", leaf("k1", "4187"))}),
        ev("set_format", 2, "s1", ["root"], internal=True),
        ev("filter", 3, "f1", ["m1"]),
        ev("select", 4, "x1", ["f1"]),
    ]
    run_b = [
        ev("from_dict", 1, "root", [], type="root"),
        ev("map", 2, "m2", ["root"], args={"fn_kwargs": arg("k2", leaf("k2", "912"))}),
        ev("set_format", 2, "s1", ["root"], internal=True),
        ev("filter", 3, "f2", ["m2"]),
        ev("select", 4, "x2", ["f2"]),
    ]
    analysis = analyze([run_a, run_b])
    (cause,) = analysis.causes
    assert cause.kind == "arguments"
    assert cause.step.line == 2 and cause.step.operation == "map"
    assert cause.differing_args == ("fn_kwargs",)
    assert cause.culprits[0].path_str == "fn_kwargs (int)"
    assert cause.culprits[0].values_str == "4187 vs 912"
    assert cause.cascade == 2
    assert [s.status for s in analysis.steps] == ["same", "cause", "same", "cascade", "cascade"]


def test_num_proc_shards_belong_to_the_cascade_of_their_map() -> None:
    """map(num_proc=2) concatenates shards named <fp>_00000_of_00002: not a new source."""
    runs = [
        [
            ev("map", 1, fp, ["root"], args={"function": arg("f" + fp, leaf("f" + fp, fp))}),
            ev(
                "concatenate_datasets",
                1,
                fp + "c",
                [f"{fp}_00000_of_00002", f"{fp}_00001_of_00002"],
                internal=True,
            ),
        ]
        for fp in ("aaaa", "bbbb")
    ]
    analysis = analyze(runs)
    assert len(analysis.causes) == 1
    assert [s.status for s in analysis.steps] == ["cause", "cascade"]


def test_a_second_problem_inside_the_cascade_is_reported_too() -> None:
    """A later step whose own argument differs as well is named, not lost in the cascade."""
    run_a = [
        ev("map", 1, "m1", ["root"], args={"function": arg("f1", leaf("f1", "a"))}),
        ev("map", 2, "n1", ["m1"], args={"fn_kwargs": arg("k1", leaf("k1", "1795306683.42", "float"))}),
    ]
    run_b = [
        ev("map", 1, "m2", ["root"], args={"function": arg("f2", leaf("f2", "b"))}),
        ev("map", 2, "n2", ["m2"], args={"fn_kwargs": arg("k2", leaf("k2", "1795306690.17", "float"))}),
    ]
    analysis = analyze([run_a, run_b])
    assert len(analysis.causes) == 1 and analysis.causes[0].cascade == 1
    (masked,) = analysis.masked
    assert masked.step.line == 2 and masked.culprits[0].kind == "timestamp"
    assert "also differs on its own" in "\n".join(human_lines(_report([run_a, run_b])))


def test_a_differing_source_is_reported_as_such() -> None:
    """A root that differs (an input file rewritten) is a source cause; no argument is blamed."""
    src = {"kind": "builder", "relative_data_dir": "csv/default-aaaa/0.0.0/h"}
    run_a = [ev("load_dataset", 1, "r1", [], type="root", source=src), ev("map", 2, "m1", ["r1"])]
    src_b = {**src, "relative_data_dir": "csv/default-bbbb/0.0.0/h"}
    run_b = [ev("load_dataset", 1, "r2", [], type="root", source=src_b), ev("map", 2, "m2", ["r2"])]
    (cause,) = analyze([run_a, run_b]).causes
    assert cause.kind == "source"
    assert cause.source_diffs == (
        ("relative_data_dir", ("csv/default-aaaa/0.0.0/h", "csv/default-bbbb/0.0.0/h")),
    )
    assert cause.cascade == 1
    lines = "\n".join(human_lines(_report([run_a, run_b])))
    assert "the source dataset differs between runs" in lines


def test_a_source_read_from_another_folder_in_each_run_is_a_difference_not_unaligned() -> None:
    """A script that loads a CSV it writes into a new temporary folder each run: its load (and
    what is made from it) differs between runs, a source cause naming the file's folder. The runs
    were "not aligned" instead (the files read were the load's identity), and the script
    "deterministic"."""

    def run(folder: str, n: str) -> list[dict[str, Any]]:
        files = [{"split": "train", "path": f"/tmp/{folder}/f.csv", "size": 8, "mtime": 1.0}]
        src = {"kind": "builder", "relative_data_dir": f"csv/default-{n * 4}/0.0.0/h", "data_files": files}
        return [ev("load_dataset", 1, f"r{n}", [], type="root", source=src), ev("map", 2, f"m{n}", [f"r{n}"])]

    analysis = analyze([run("tmpa", "a"), run("tmpb", "b")])
    assert analysis.unaligned == 0
    (cause,) = analysis.causes
    assert cause.kind == "source" and cause.cascade == 1
    dirs = ("csv/default-aaaa/0.0.0/h", "csv/default-bbbb/0.0.0/h")
    assert ("relative_data_dir", dirs) in cause.source_diffs
    assert ("data_files[f.csv].folder", ("/tmp/tmpa", "/tmp/tmpb")) in cause.source_diffs
    lines = " ".join(" ".join(human_lines(_report([run("tmpa", "a"), run("tmpb", "b")]))).split())
    assert "hint: the data files are read from another folder in each run" in lines, lines


def test_random_fallbacks_are_not_hashing_differences() -> None:
    """A random fingerprint differs by construction: it is reported with the unpicklable piece,
    and alone it makes exit code 3, not 1."""
    tree = {
        "l": "",
        "t": "function",
        "s": "function 'f'",
        "r": "<function f>",
        "d": None,
        "e": "TypeError: cannot pickle 'generator' object",
        "c": [
            {"l": "code", "t": "code", "s": "code", "r": "", "d": "c"},
            {
                "l": "global 'ids'",
                "t": "generator",
                "s": "generator",
                "r": "<gen>",
                "d": None,
                "e": "TypeError: x",
            },
        ],
    }
    fb = {"argument": "function", "error": "TypeError: cannot pickle 'generator' object"}
    runs = [
        [
            ev("map", 1, fp, ["p"], args={"function": arg(None, tree)}, random_fallback=fb),
            ev("filter", 2, fp + "f", [fp]),
        ]
        for fp in ("a", "b")
    ]
    analysis = analyze(runs)
    assert analysis.deterministic_causes == ()
    (cause,) = analysis.random_causes
    assert cause.unpicklable[0].path_str == "function → global 'ids' (generator)"
    assert cause.errors == ("TypeError: cannot pickle 'generator' object",)
    assert cause.cascade == 1
    assert _report(runs).exit_code == ExitCode.RANDOM_FINGERPRINT


@pytest.mark.parametrize("predictable", [True, False])
def test_a_fallback_that_repeats_in_every_run_is_not_deterministic(predictable: bool) -> None:
    """A fallback drawn from Python's global `random` (datasets < 2.17) that gave the same
    fingerprint in every run (`random.seed`) exits 1 with a hint: another version of the step
    would load this result. The same fingerprint from a fallback that is not predictable (a map
    that writes nothing keeps its input's) stays a random fingerprint (exit 3)."""
    fb = {"argument": "function", "error": "cannot pickle 'generator' object", "predictable": predictable}
    runs = [[ev("map", 1, "1c80317fa3b1799d", ["p"], random_fallback=fb)] for _ in range(2)]
    report = _report(runs)
    assert report.exit_code == (ExitCode.PROBLEMS_FOUND if predictable else ExitCode.RANDOM_FINGERPRINT)
    (cause,) = report.analysis.random_causes  # type: ignore[union-attr]
    assert cause.predictable == predictable
    text = "\n".join(human_lines(report))
    assert ("repeats across runs after random.seed(...)" in text) == predictable
    assert "pass new_fingerprint=" in text


def test_events_align_by_call_site_when_a_run_has_extra_events() -> None:
    """An event only one run has is counted, and the rest still line up."""
    run_a = [ev("map", 1, "a", ["p"]), ev("filter", 2, "b", ["a"])]
    run_b = [ev("map", 1, "a", ["p"]), ev("sort", 5, "z", ["a"]), ev("filter", 2, "b", ["a"])]
    analysis = analyze([run_a, run_b])
    assert analysis.unaligned == 1
    assert analysis.causes == ()
    assert [s.operation for s in analysis.steps] == ["map", "filter"]


def test_load_events_skips_a_torn_line_and_orders_by_seq(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    step = {"v": 1, "type": "checkpoint"}
    lines = [json.dumps({**step, "seq": 2, "x": 1}), json.dumps({**step, "seq": 1}), '{"seq": 3, "tor']
    path.write_text("\n".join(lines))
    assert [e.seq for e in load_events(path).events] == [1, 2]


def _report(runs: list[list[dict[str, Any]]]) -> DeterminismReport:
    from cachetool.determinism.verdict import RunOutcome, as_events

    outcomes = tuple(
        RunOutcome(
            index=i,
            hash_seed=i + 1,
            returncode=0,
            timed_out=False,
            duration=0.1,
            events=as_events(r),
            stderr_tail="",
        )
        for i, r in enumerate(runs)
    )
    return DeterminismReport(script="pipe.py", args=(), isolated=False, runs=outcomes, analysis=analyze(runs))


# --- cachetool.checkpoint -------------------------------------------------------------------------


def test_checkpoint_does_nothing_outside_a_determinism_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import cachetool

    monkeypatch.delenv("CACHETOOL_TRACE_EVENTS", raising=False)
    assert cachetool.checkpoint("config", {"a": 1}) is None


def test_checkpoint_records_the_datasets_digest_and_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint event carries the digest datasets would compute, its tree, and the call site."""
    from datasets.fingerprint import Hasher

    import cachetool

    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("CACHETOOL_TRACE_EVENTS", str(events))
    monkeypatch.setenv("CACHETOOL_TRACE_TREES", "1")
    value = {"lr": 0.1, "stop": frozenset(["a", "b"])}
    digest = cachetool.checkpoint("config", value)
    (event,) = load_events(events).events
    assert digest == event.result == Hasher.hash(value)
    assert event.type == "checkpoint" and event.transform == "config"
    assert event.args["value"].tree["d"] == digest  # type: ignore[index]
    assert event.call_site is not None and event.call_site.file == __file__
    assert event.random_fallback is None


# --- the runner on small scripts (cachetool.checkpoint, no datasets) ------------------------------

CHECKPOINTS = textwrap.dedent(
    """
    import sys, time
    import cachetool

    STOP = frozenset(["the", "a", "an", "of", "to", "in"])
    mode = sys.argv[1]
    if mode == "stable":
        cachetool.checkpoint("config", {"lr": 0.1, "tags": {"b", "a"}, "stop": sorted(STOP)})
    elif mode == "frozenset":
        cachetool.checkpoint("config", {"lr": 0.1, "stop": STOP})
    elif mode == "clock":
        cachetool.checkpoint("config", {"lr": 0.1, "started": time.time()})
    elif mode == "unpicklable":
        cachetool.checkpoint("ids", {"gen": (i for i in range(3))})
    elif mode == "fail":
        raise RuntimeError("boom: the input is missing")
    elif mode == "sleep":
        time.sleep(30)
    """
)


@pytest.fixture(scope="module")
def checkpoint_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("checkpoints") / "pipeline.py"
    path.write_text(CHECKPOINTS)
    return path


def run_plain(script: Path, mode: str, tmp_path: Path, **kw: Any) -> DeterminismReport:
    return check_determinism(script, [mode], launcher=[sys.executable], env=clean_env(tmp_path), **kw)


@pytest.mark.slow
def test_checkpoints_that_match_exit_0(checkpoint_script: Path, tmp_path: Path) -> None:
    report = run_plain(checkpoint_script, "stable", tmp_path, runs=3)
    assert report.exit_code == ExitCode.OK
    assert [r.hash_seed for r in report.runs] == [1, 2, 3]
    assert len(report.analysis.steps) == 1  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_frozenset_depends_on_the_hash_seed(checkpoint_script: Path, tmp_path: Path) -> None:
    """The equal-seed rerun tells that the difference depends on PYTHONHASHSEED."""
    report = run_plain(checkpoint_script, "frozenset", tmp_path)
    assert report.exit_code == ExitCode.PROBLEMS_FOUND
    (cause,) = report.analysis.causes  # type: ignore[union-attr]
    assert cause.culprits[0].path_str == "value['stop'] (frozenset of 6 str)"
    assert cause.variation == "PYTHONHASHSEED"
    assert report.rerun is not None and report.rerun.hash_seed == 1
    assert cause.step.line == 10 and cause.step.file == str(checkpoint_script)


@pytest.mark.slow
def test_a_timestamp_changes_on_every_run(checkpoint_script: Path, tmp_path: Path) -> None:
    report = run_plain(checkpoint_script, "clock", tmp_path, hash_seeds=[7, 8], isolated=True)
    (cause,) = report.analysis.causes  # type: ignore[union-attr]
    assert cause.culprits[0].path == ("['started']",)
    assert cause.culprits[0].kind == "timestamp"
    assert cause.variation == "every run"
    assert [r.hash_seed for r in report.runs] == [7, 8]
    github = github_lines(report)
    assert github[0].startswith(f"::error file={os.path.relpath(checkpoint_script)},line=12,")


@pytest.mark.slow
def test_an_unpicklable_checkpoint_exits_3_with_the_exception(
    checkpoint_script: Path, tmp_path: Path
) -> None:
    report = run_plain(checkpoint_script, "unpicklable", tmp_path)
    assert report.exit_code == ExitCode.RANDOM_FINGERPRINT
    (cause,) = report.analysis.random_causes  # type: ignore[union-attr]
    assert cause.unpicklable[0].path_str == "value['gen'] (generator)"
    assert "cannot pickle 'generator' object" in cause.unpicklable[0].error


@pytest.mark.slow
def test_a_failing_script_exits_2_with_the_tail_of_its_stderr(
    checkpoint_script: Path, tmp_path: Path
) -> None:
    report = run_plain(checkpoint_script, "fail", tmp_path)
    assert report.exit_code == ExitCode.USAGE
    failed = report.failed_run
    assert failed is not None and failed.returncode == 1
    assert "RuntimeError: boom: the input is missing" in failed.stderr_tail
    assert len(report.runs) == 1  # the other runs are not started
    text = "\n".join(human_lines(report))
    assert "exited 1" in text and "boom: the input is missing" in text


@pytest.mark.slow
def test_a_script_that_times_out_exits_2(checkpoint_script: Path, tmp_path: Path) -> None:
    """A run that times out exits 2; one that wrote nothing to stderr says so (it promised "last
    lines of its stderr:" and showed none)."""
    # Nothing has to happen before this timeout: the script sleeps 30 s, and a run stopped wherever
    # it is (its interpreter still starting included) is a run that timed out.
    report = run_plain(checkpoint_script, "sleep", tmp_path, timeout=0.3)
    assert report.exit_code == ExitCode.USAGE
    assert report.failed_run is not None and report.failed_run.timed_out
    assert not report.failed_run.stderr_tail
    assert human_lines(report)[-1].endswith("timed out after 0 s; it wrote nothing to stderr")


# --- the next run starts while the one before works ---------------------------------------------

#: Each run notes when its interpreter started and when its script ended (wall clock; the start
#: from /proc, to a clock tick), and whether `datasets` was imported before the script's first line;
#: it sleeps a little at the end, so runs can overlap.
OVERLAP = textwrap.dedent(
    """
    import os, sys, time
    preloaded = "datasets" in sys.modules
    import datasets
    import cachetool

    cachetool.checkpoint("rows", [1, 2, 3])
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        started = time.time() - (float(f.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK"))
    time.sleep(0.5)
    with open(os.path.join(sys.argv[1], str(os.getpid())), "w") as f:
        f.write(f"{started} {time.time()} {preloaded}")
    """
)


@pytest.mark.slow
def test_the_next_run_starts_and_imports_datasets_while_the_one_before_works(tmp_path: Path) -> None:
    """With `--no-cold` (runs one after the other on the shared cache), run 2's interpreter was
    started before run 1 ended, `datasets` was already imported when its script began, and the
    verdict is the usual one."""
    script = tmp_path / "pipe.py"
    script.write_text(OVERLAP)
    notes = tmp_path / "notes"
    notes.mkdir()
    report = check_determinism(script, [str(notes)], env=clean_env(tmp_path), cold=False, rerun=False)
    assert report.exit_code == ExitCode.OK, report.warnings
    runs = sorted(
        (float(end), float(start), preloaded == "True")
        for start, end, preloaded in (n.read_text().split() for n in notes.iterdir())
    )
    (end_1, _, preloaded_1), (_, start_2, preloaded_2) = runs
    # Run 1's interpreter imported datasets, ran the script and slept 0.5 s after run 2's started.
    assert start_2 < end_1 - 0.5, runs
    assert preloaded_1 and preloaded_2
    assert all(run.duration < 30 for run in report.runs)


#: Runner mechanics that do not involve `datasets` (no run imports it): each run notes when its
#: script began and ended. "ok": it sleeps 0.5 s, so two runs going at once would overlap. "fail":
#: it waits (up to 30 s) until the next run's interpreter, started while this one works, is there
#: waiting for its turn, notes whether it saw it, and exits 3.
TURNS = textwrap.dedent(
    """
    import os, sys, time
    import cachetool

    began = time.time()
    cachetool.checkpoint("rows", [1, 2, 3])
    notes, mode = sys.argv[1:]
    waiting = b"cachetool.determinism.waiter\\0" + sys.argv[0].encode() + b"\\0"


    def next_run_waits():
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if waiting in f.read() and int(pid) != os.getpid():
                        return True
            except OSError:
                continue
        return False


    seen = False
    if mode == "fail":
        deadline = time.time() + 30
        while not seen and time.time() < deadline:
            seen = next_run_waits()
            time.sleep(0.01)
    else:
        time.sleep(0.5)
    with open(os.path.join(notes, str(os.getpid())), "w") as f:
        f.write(f"{began} {time.time()} {seen}")
    if mode == "fail":
        sys.exit(3)
    """
)


@pytest.mark.slow
def test_runs_on_the_shared_cache_never_go_beside_each_other(tmp_path: Path) -> None:
    """A script writes files of its own (`save_to_disk(sys.argv[1])`, then a map of what it
    loaded back from there): two runs of it going at once rewrite each other's files, and a run
    read an Arrow file the other had just truncated ("Tried reading schema message, was null or
    length 0") or lost a `num_proc` worker ("One of the subprocesses has abruptly died"). In the
    default mode the cold first run went beside the second; now every run on the shared cache goes
    after the one before, so the spans of the two runs' scripts (each sleeps 0.5 s) do not meet."""
    script = tmp_path / "pipe.py"
    script.write_text(TURNS)
    notes = tmp_path / "notes"
    notes.mkdir()
    report = check_determinism(script, [str(notes), "ok"], env=clean_env(tmp_path), rerun=False)
    assert report.exit_code == ExitCode.OK, report.warnings
    assert [run.cold for run in report.runs] == [True, False]
    (began_1, end_1), (began_2, end_2) = sorted(
        (float(began), float(end)) for began, end, _ in (n.read_text().split() for n in notes.iterdir())
    )
    assert end_1 - began_1 >= 0.5 and end_2 - began_2 >= 0.5
    assert end_1 <= began_2, (began_1, end_1, began_2, end_2)


@pytest.mark.slow
def test_a_script_that_sets_its_environment_imports_datasets_itself(tmp_path: Path) -> None:
    """A script that sets HF_DATASETS_CACHE before `import datasets` gets its own value: datasets
    is not imported ahead of it."""
    script = tmp_path / "pipe.py"
    mine = tmp_path / "my-cache"
    script.write_text(
        "import os, sys\n"
        "os.environ['HF_DATASETS_CACHE'] = sys.argv[1]\n"
        "import datasets, cachetool\n"
        "cachetool.checkpoint('mine', str(datasets.config.HF_DATASETS_CACHE) == sys.argv[1])\n"
    )
    report = check_determinism(script, [str(mine)], env=clean_env(tmp_path), rerun=False)
    assert report.exit_code == ExitCode.OK, report.warnings
    for run in report.runs:
        (event,) = run.events
        assert event.args["value"].repr == "True"


@pytest.mark.slow
def test_a_failed_run_leaves_no_interpreter_waiting_for_its_turn(tmp_path: Path) -> None:
    """Run 1 fails while run 2's interpreter waits (run 1 saw it): the report is about run 1, and
    run 2's interpreter is gone when the check returns (it never ran the script)."""
    script = tmp_path / "pipe.py"
    script.write_text(TURNS)
    notes = tmp_path / "notes"
    notes.mkdir()
    report = check_determinism(script, [str(notes), "fail"], env=clean_env(tmp_path), cold=False)
    assert report.exit_code == ExitCode.USAGE and len(report.runs) == 1
    assert report.runs[0].returncode == 3
    (note,) = notes.iterdir()  # only run 1 ran the script
    assert note.read_text().split()[2] == "True", "run 2's interpreter was not waiting"
    waiting = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(script).encode() in f.read():
                    waiting.append(pid)
        except OSError:
            continue
    assert waiting == []


# --- the command -----------------------------------------------------------------------------------


def test_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["check-determinism", str(tmp_path / "missing.py")])
    assert result.exit_code == 2
    assert "script not found" in result.stderr
    (tmp_path / "p.py").write_text("")
    result = runner.invoke(app, ["check-determinism", str(tmp_path / "p.py"), "--hash-seeds", "1,x"])
    assert result.exit_code == 2
    assert "invalid --hash-seeds '1,x'" in result.stderr
    # Two runs under one seed prove nothing: refused, not reported deterministic.
    result = runner.invoke(app, ["check-determinism", str(tmp_path / "p.py"), "--hash-seeds", "1,1"])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "--hash-seeds" in result.stderr and "differ" in result.stderr


def test_help_documents_exit_codes_and_examples() -> None:
    result = CliRunner().invoke(app, ["check-determinism", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "Exit codes: 0" in result.stdout
    assert "cachetool check-determinism prepare.py --split train --max-rows 1000" in result.stdout
    assert "cachetool check-determinism prepare.py -- --runs 3" in result.stdout


@pytest.mark.slow
def test_cli_json_document_and_script_args(
    checkpoint_script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arguments after `--` reach the script; --json prints the documented document."""
    for key, value in clean_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(
        app, ["check-determinism", str(checkpoint_script), "--hash-seeds", "3,4", "--json", "--", "frozenset"]
    )
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["version"] == 1
    assert doc["exit_code"] == 1 and doc["verdict"] == "not deterministic"
    assert doc["args"] == ["frozenset"]
    assert doc["variations"] == {"hash_seeds": [3, 4], "isolated_cache": False}
    (difference,) = doc["differences"]
    assert difference["culprits"][0]["path_str"] == "value['stop'] (frozenset of 6 str)"
    assert difference["culprits"][0]["kind"] == "set-order"
    assert difference["variation"] == "PYTHONHASHSEED"
    assert set(doc) == {
        "version",
        "script",
        "args",
        "exit_code",
        "verdict",
        "variations",
        "runs",
        "rerun",
        "transforms",
        "unaligned_events",
        "differences",
        "random_fingerprints",
        "masked_differences",
        "unobserved",
        "one_run_only",
        "uncached",
        "warnings",
        "nothing_compared",
    }


# --- the corpus: real datasets pipelines -----------------------------------------------------------

#: script -> (argument, access path below it, culprit kind)
CULPRITS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "c01_lambda_set_literal.py": ("function", ("code", "const[2]"), "set-order"),
    "c02_closure_frozenset.py": ("function", ("closure 'stop'",), "set-order"),
    "c03_global_config.py": ("function", ("global 'CONFIG'", ".languages"), "set-order"),
    "c04_label2id_from_set.py": ("function", ("__self__", ".label2id"), "order"),
    "c05_prompt_from_set.py": ("fn_kwargs", ("['prompt']",), "order"),
    "c06_regex_from_set.py": ("function", ("global 'PATTERN'", ".pattern"), "order"),
    "c07_columns_from_set.py": ("remove_columns", (), "order"),
    "c08_time_closure.py": ("function", ("closure 'started'",), "timestamp"),
    "c09_uuid_default.py": ("function", ("default 'run_id'",), "uuid"),
    "c10_mkdtemp_self.py": ("function", (".out_dir",), "temp-path"),
    "c11_address_repr.py": ("fn_kwargs", ("['cache_key']",), "address"),
    "c12_unseeded_shuffle.py": ("generator", (), "random-state"),
    "c15_helper_module.py": ("function", ("closure 'keep'",), "set-order"),
    "c17_seed_from_clock.py": ("fn_kwargs", ("['seed']",), "value"),
    "c18_cascade.py": ("function", ("code", "const[2]"), "set-order"),
    # u*: written from public reports before the check saw them (each control is uk* of the number).
    "u01_dict_order_from_set.py": ("function", ("global 'label2id'",), "order"),
    "u02_random_default_arg.py": ("function", ("default 'noise'",), "value"),
    "u03_pid_closure.py": ("function", ("closure 'pid'",), "value"),
    "u04_temp_path_on_self.py": ("function", (".scratch",), "temp-path"),
    "u05_numpy_rng_unseeded.py": ("fn_kwargs", ("['rng']",), "random-state"),
    "u06_json_of_set_dict.py": ("fn_kwargs", ("['config']",), "order"),
    "u07_reduce_time.py": ("function", ("global 'clock'", "args[0]"), "timestamp"),
    "u08_fn_kwargs_list_of_set.py": ("fn_kwargs", ("['stop']",), "order"),
    "u09_filter_thresholds_from_set.py": ("function", ("global 'ALLOWED'",), "order"),
    "u10_split_seed_none.py": ("generator", (), "random-state"),
    "u11_split_then_set_on_test.py": ("fn_kwargs", ("['m']",), "order"),
    "u14_append_log_on_self.py": ("function", (".log",), "value"),
    "u15_partial_list_from_set.py": ("function", ("keywords['cols']",), "order"),
    # d*: the leaf, several objects deep or reached by several paths, named as what it is.
    "d01_dataclass_field_set_literal.py": (
        "function",
        (".cfg", "class", ".__init__", "closure '_dflt_vocab'", "code", "const[1]"),
        "set-order",
    ),
    "d02_uuid_on_self.py": ("function", (".run_id",), "uuid"),
    "d03_id_on_self.py": ("function", (".key",), "address"),
    "d04_frozenset_keyed_dict.py": ("fn_kwargs", ("['cities']",), "set-order"),
    "d05_strftime_run_name.py": ("function", (".run_name",), "timestamp"),
}
UNPICKLABLE = {
    "c13_unpicklable_connection.py": (
        "function → .conn (Connection)",
        "cannot pickle 'sqlite3.Connection' object",
    ),
    "c14_generator_global.py": ("function → global 'ids' (generator)", "cannot pickle 'generator' object"),
}
#: Look-alikes checked here, in --isolated mode (k09, a tokenizer configured before the first map,
#: is also checked on a warm cache by tests/test_determinism_diagnosis.py).
#: uk12 and uk13 (controls of cache-state causes) are checked in tests/test_determinism_diagnosis.py.
CONTROLS = sorted(
    p.name
    for pattern in ("k0*.py", "uk*.py", "dk*.py")
    for p in CORPUS.glob(pattern)
    if not p.name.endswith("_helpers.py") and not p.name.startswith(("uk12_", "uk13_"))
)
#: The controls run as one pipeline (tests/corpus_pipeline.py: each runs as `python k0N.py` would,
#: one after the other in one interpreter). Three runs: the `set` of five words in k01 iterates in
#: a different order under each of the hash seeds 1, 2 and 3, so the third run is a third order
#: compared with the other two; and with --isolated, 3 runs are more than the workers of a 2-core
#: machine, so one run waits for a worker to free up.


@pytest.fixture(scope="module")
def corpus_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


def check_corpus(script: str, base: Path, **kw: Any) -> DeterminismReport:
    kw.setdefault("isolated", True)
    kw.setdefault("rerun", False)
    kw.setdefault("timeout", 120)
    return check_determinism(CORPUS / script, env=clean_env(base / script), cwd=CORPUS, **kw)


#: The pipeline whose fingerprint depends on PYTHONHASHSEED (its prompt joins a set), also run
#: plainly with each run's hash seed (`test_recorded_fingerprints_equal_a_plain_run`).
SEEDED = "c05_prompt_from_set.py"


#: The pipeline checked through the command (``check-determinism c02_closure_frozenset.py
#: --isolated --format github`` in tests/corpus): the report that command made is also the one its
#: culprit is read from, so the pipeline runs once for both tests.
CLI_CHECKED = "c02_closure_frozenset.py"


@dataclass(frozen=True)
class CommandOutput:
    """What a command gave its user: exit code, stdout and stderr."""

    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def cli_github(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CommandOutput, DeterminismReport]:
    """The folder the command ran in, what it gave, and the report `check_determinism` returned to
    it (the real function, called by the command as always; its return value is kept on the way).
    Once per session."""

    def run(folder: Path) -> tuple[CommandOutput, DeterminismReport]:
        from cachetool.determinism import check as runner

        reports: list[DeterminismReport] = []
        real = runner.check_determinism

        def keep(*args: Any, **kwargs: Any) -> DeterminismReport:
            reports.append(real(*args, **kwargs))
            return reports[-1]

        with pytest.MonkeyPatch.context() as mp:
            for key, value in clean_env(folder).items():
                mp.setenv(key, value)
            mp.chdir(CORPUS)
            mp.setattr(runner, "check_determinism", keep)
            args = ["check-determinism", CLI_CHECKED, "--isolated", "--format", "github"]
            result = CliRunner().invoke(app, args)
        assert len(reports) == 1, result.output
        return CommandOutput(result.exit_code, result.stdout, result.stderr), reports[0]

    folder, (said, report) = once(tmp_path_factory, "corpus-cli", run)
    return folder, said, report


#: The culprits and unpicklable arguments, but the one checked through the command: one pipeline
#: of them all (tests/corpus_pipeline.py: each runs as under `python cNN.py`, in one interpreter;
#: c05's steps are also compared with plain runs of it). Checked alone
#: (2 runs, hash seeds 1 and 2), each of them gave the culprit it gives in this pipeline: path, kind,
#: argument, cascade, where the function is defined, and the piece that cannot be pickled.
TOGETHER = sorted((set(CULPRITS) | set(UNPICKLABLE)) - {CLI_CHECKED})


@pytest.fixture(scope="module")
def together(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], DeterminismReport]:
    """The folder the `TOGETHER` pipeline was checked in, the scripts checked and its report (once
    per session, with `--isolated`, in tests/corpus_pipeline.py `shared_reports`: one pipeline with
    the corpus scripts other files check in that mode)."""
    folder, checked, (report,) = shared_reports(tmp_path_factory, "isolated")
    return folder, checked, report


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(CULPRITS))
def test_corpus_culprit_is_named(script: str, request: pytest.FixtureRequest) -> None:
    """Each pipeline's first differing fingerprint is traced to the known part of its argument
    (c02's report is the one the command made in `cli_github`, the others'
    the `TOGETHER` pipeline's, each script's steps told apart by the file they were called from)."""
    report: DeterminismReport
    if script == CLI_CHECKED:
        (base, _, report), checked = request.getfixturevalue("cli_github"), [script]
    else:
        base, checked, report = request.getfixturevalue("together")
    assert report.exit_code == ExitCode.PROBLEMS_FOUND, "\n".join(human_lines(report))
    causes = causes_of(script, report, checked)
    assert causes, "\n".join(human_lines(report))
    cause = causes[0]
    assert cause.kind == "arguments"
    argument, path, kind = CULPRITS[script]
    assert argument in cause.differing_args
    culprit = next(c for c in cause.culprits if c.argument == argument)
    assert (culprit.path, culprit.kind) == (path, kind), "\n".join(cause_lines(cause))
    # --isolated: the runs used temporary caches; the cache the script would use is untouched.
    assert not (base / "cache").exists()
    # The root of every recorded tree is the digest datasets computed for that argument.
    compared = 0
    for event in events_of(script, report):
        for entry in event.args.values():
            if entry.digest is not None and entry.tree is not None:
                assert entry.tree["d"] == entry.digest, (event.operation, entry.repr)
                compared += 1
    assert compared >= 2
    if script == "c15_helper_module.py":
        assert cause.step.function_defined == f"{CORPUS / 'c15_helpers.py'}:7"
        assert "(defined in " in cause_lines(cause)[0]
    if script == "c18_cascade.py":
        assert cause.cascade == 4
        assert "  4 downstream fingerprints differ because of this" in cause_lines(cause)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(UNPICKLABLE))
def test_corpus_unpicklable_argument_exits_3(
    script: str, together: tuple[Path, list[str], DeterminismReport]
) -> None:
    """A transform datasets cannot hash: the piece that fails to pickle and the real exception.
    Checked in the `TOGETHER` pipeline: no fingerprint of the script's steps differs but by a
    random fallback (alone, it exits 3), and exactly one of its steps fell back."""
    _, checked, report = together
    assert not causes_of(script, report, checked)
    (cause,) = causes_of(script, report, checked, random=True)
    path, error = UNPICKLABLE[script]
    assert cause.unpicklable[0].path_str == path
    assert error in cause.unpicklable[0].error


@pytest.mark.slow
def test_corpus_input_rewritten_between_runs_is_a_source_difference(corpus_base: Path) -> None:
    """Default mode (the user's cache, one run after the other): the CSV is rewritten by each run."""
    report = check_corpus("c16_input_rewritten.py", corpus_base, isolated=False, rerun=True)
    assert report.exit_code == ExitCode.PROBLEMS_FOUND
    (cause,) = report.analysis.causes  # type: ignore[union-attr]
    assert cause.kind == "source" and cause.step.operation == "load_dataset"
    assert cause.differing_args == ()
    keys = [k for k, _ in cause.source_diffs]
    assert "relative_data_dir" in keys  # the builder folder: the data files' hash changed
    if "data_files[reviews.csv].mtime" in keys:  # when the tracer records the files
        assert "data_files[reviews.csv].size" not in keys
    assert cause.variation == "every run"
    assert cause.cascade >= 1


@pytest.mark.slow
def test_corpus_controls_are_deterministic(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Look-alikes (set attribute, tuple literal, lock, seeded shuffle, sorted set, int frozenset,
    imported function, timestamp taken inside, tokenizer configured before), run one after
    another in one pipeline over 3 runs (tests/corpus_pipeline.py `controls_report`, with the
    controls tests/test_determinism_false_alarms.py checks; `CONTROLS` says what the third run
    adds), report no difference, with at least two steps of each of them compared."""
    _, report = controls_report(tmp_path_factory)
    assert report.exit_code == ExitCode.OK, "\n".join(human_lines(report))
    # and a fourth on the first run's cache, which observes k15's cache-state note
    assert [run.hash_seed for run in report.runs] == [1, 2, 3, 1]
    assert report.analysis is not None
    compared = Counter(Path(step.file).name for step in report.analysis.steps if step.file)
    assert all(compared[name] >= 2 for name in CONTROLS), compared


@pytest.mark.slow
def test_recorded_fingerprints_equal_a_plain_run(
    corpus_base: Path, together: tuple[Path, list[str], DeterminismReport]
) -> None:
    """Tracing changes no fingerprint: a plain `python c05_prompt_from_set.py` with a run's hash
    seed prints the fingerprint that run recorded last in the script's steps (in the `TOGETHER`
    pipeline; its fingerprint depends on the seed, which makes this a strong check). The two
    compared runs (a third, on the first run's cache, observes the cache-state notes of other
    scripts of the pipeline)."""
    script, (_, _, report) = SEEDED, together
    assert [run.hash_seed for run in report.runs[:2]] == [1, 2]
    for k, run in enumerate(report.runs[:2]):
        env = {**clean_env(corpus_base / "plain"), "PYTHONHASHSEED": str(run.hash_seed)}
        proc = subprocess.run(
            [sys.executable, str(CORPUS / script)],
            env=env,
            cwd=CORPUS,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        printed = proc.stdout.split()[-1]
        recorded = [e.result for e in events_of(script, report, k) if not e.internal]
        assert recorded[-1] == printed


@pytest.mark.slow
def test_cli_on_a_corpus_pipeline_github_annotations(
    cli_github: tuple[Path, CommandOutput, DeterminismReport],
) -> None:
    """--format github prints an ::error annotation at the call site in the user's script (the
    same check's report is read by test_corpus_culprit_is_named[c02_closure_frozenset.py])."""
    _, result, _ = cli_github
    assert result.exit_code == 1, result.stderr
    line = result.stdout.strip().splitlines()[0]
    assert line.startswith(
        "::error file=c02_closure_frozenset.py,line=18,title=fingerprint not deterministic::"
    )
    assert "closure 'stop' (frozenset of 12 str)" in line


def _plain_run(script: Path, env: dict[str, str], *args: str) -> str:
    """`python script args` (no tracing), which must succeed; its stdout."""
    proc = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


#: A pipeline on data.csv beside it, in three parts made from the loaded CSV. "first" makes what a
#: plain run leaves before the check: the first step of each part (of the third, the steps that
#: write files the script names). "all" adds the steps the cache lacks.
#: 1. Steps that note each time they compute (in notes/<what>-<run marker>): a map with
#:    `load_from_cache_file=True`, then filter with `num_proc`, shuffle, sort, train_test_split.
#: 2. A map of random values (the cache holds it), then a filter of it (the cache lacks it); the
#:    script prints whether the filter kept the rows of the map it was made from.
#: 3. Steps writing files the script names in mine/: `cache_file_name=`,
#:    `indices_cache_file_name=`, `train_/test_indices_cache_file_name=`.
COLD_OPS = textwrap.dedent(
    """\
    import os
    import random
    import sys

    from datasets import load_dataset

    notes = sys.argv[1]


    def note(what):
        with open("/proc/self/environ", "rb") as f:  # the check's run marker, out of os.environ
            runs = [v[20:].decode() for v in f.read().split(b"\\0") if v.startswith(b"CACHETOOL_CHECK_RUN=")]
        with open(os.path.join(notes, what + "-" + (runs[0] if runs else "plain")), "a") as f:
            f.write("x")


    def double(ex):
        note("map")
        return {"y": ex["x"] * 2}


    def keep(ex):
        note("filter")
        return ex["x"] % 3 != 0


    here = os.path.dirname(os.path.abspath(__file__))
    mine = os.path.join(here, "mine")
    os.makedirs(mine, exist_ok=True)
    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")

    noted = ds.map(double, load_from_cache_file=True)
    drawn = ds.map(lambda ex: {"r": random.random()})
    named = ds.map(lambda ex: {"y": ex["x"] + 1}, cache_file_name=os.path.join(mine, "step.arrow"),
                   load_from_cache_file=True)
    named = named.shuffle(seed=1, indices_cache_file_name=os.path.join(mine, "idx.arrow"))
    named = named.train_test_split(test_size=0.5, seed=2,
                                   train_indices_cache_file_name=os.path.join(mine, "train.arrow"),
                                   test_indices_cache_file_name=os.path.join(mine, "test.arrow"))
    if sys.argv[2] == "all":
        noted = noted.filter(keep, num_proc=2)
        noted = noted.shuffle(seed=3).sort("y")
        noted = noted.train_test_split(test_size=0.25, seed=5)["test"]
        kept = drawn.filter(lambda ex: ex["r"] > 0.5)
        print(sorted(kept["x"]) == sorted(x for x, r in zip(drawn["x"], drawn["r"]) if r > 0.5))
    """
)


@pytest.mark.slow
def test_the_cold_run_computes_every_step_and_leaves_the_cache_as_a_plain_run_would(tmp_path: Path) -> None:
    """The cache holds the first step of each part of `COLD_OPS` (a plain run made them) and lacks
    the next ones. The cold first run computes every step: map (even with
    `load_from_cache_file=True`), filter with `num_proc`, shuffle, sort, train_test_split. It
    leaves the files the cache held as they were (a reader on another host would lose a file
    replaced under it), and what it made from those recomputed steps it keeps aside too (the
    temporary folder is gone afterwards). The second run loads the map and makes the rest from
    it, where a plain run writes them: a plain run afterwards loads every step and writes nothing.

    Also (each was a check of its own on a pipeline of its own): the filter of the random map the
    cache held was made from that map, never from the values the cold run drew again (every later
    plain run loaded the cached map with a filter that did not match it); the files the script
    names (`cache_file_name=`, `indices_cache_file_name=`, `train_/test_indices_cache_file_name=`),
    which the cold run computed with `load_from_cache_file=False` and datasets moved its result
    over, under any reader that had them mapped, are left as they were; the check still compares
    every step."""
    script = tmp_path / "pipe.py"
    script.write_text(COLD_OPS)
    (tmp_path / "data.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(40)))
    env = clean_env(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    cache = tmp_path / "cache"
    mine = tmp_path / "mine"

    def plain(steps: str) -> tuple[dict[str, tuple[int, int]], str]:
        out = _plain_run(script, env, str(notes), steps)
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.rglob("cache-*.arrow")}, out

    def named() -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in mine.iterdir()}

    held, _ = plain("first")
    assert len(held) == 2, sorted(held)  # the noted map and the random one
    held_named = named()
    assert sorted(held_named) == ["idx.arrow", "step.arrow", "test.arrow", "train.arrow"]
    for n in notes.iterdir():
        n.unlink()
    report = check_determinism(script, [str(notes), "all"], env=env, rerun=False)
    assert report.exit_code == ExitCode.OK, report.warnings
    assert [run.cold for run in report.runs] == [True, False]
    # The map ran in the cold run only; the filter (in num_proc workers) in both runs.
    ran = sorted(n.name.split("-", 1) for n in notes.iterdir())
    assert [what for what, _ in ran] == ["filter", "filter", "map"], ran
    assert ran[2][1] in (ran[0][1], ran[1][1]) and ran[0][1] != ran[1][1] and "plain" not in ran[2][1], ran
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cache.rglob("cache-*.arrow")}
    assert held.items() <= after.items(), (held, after)
    assert len(after) >= 8, sorted(after)  # the noted steps (6 or more), the random map and its filter
    assert named() == held_named
    assert not [p for p in Path(env["TMPDIR"]).iterdir() if p.name.startswith("hf_datasets-")]
    for n in notes.iterdir():
        n.unlink()
    assert plain("all") == (after, "True\n")
    assert not list(notes.iterdir())


SAVES_AND_RELOADS = textwrap.dedent(
    """\
    import os, sys, time
    import datasets

    saved, log = sys.argv[1], sys.argv[2]
    with open(log, "a") as f:
        f.write(f"start {time.time()}\\n")
    ds = datasets.Dataset.from_dict({"x": list(range(200))}).map(lambda e: {"y": e["x"] * 2})
    ds.save_to_disk(saved)
    again = datasets.load_from_disk(saved).map(lambda e: {"z": e["y"] + 1})
    time.sleep(0.5)
    with open(log, "a") as f:
        f.write(f"end {time.time()}\\n")
    print(sum(again["z"]))
    """
)


@pytest.mark.slow
def test_isolated_runs_go_one_after_another_so_a_saved_folder_is_never_written_by_two(
    tmp_path: Path,
) -> None:
    """A script that saves to a folder of its own and loads it back: `--isolated` runs go one
    after the other (two at once rewrote the folder one of them had memory-mapped, and it died
    of SIGBUS); the check passes."""
    (tmp_path / "saves.py").write_text(SAVES_AND_RELOADS, encoding="utf-8")
    log = tmp_path / "runs.log"
    report = check_determinism(
        tmp_path / "saves.py",
        [str(tmp_path / "saved"), str(log)],
        isolated=True,
        rerun=False,
        env=clean_env(tmp_path),
        cwd=tmp_path,
    )
    assert report.exit_code == 0, [o.stderr_tail for o in report.runs]
    marks = [line.split() for line in log.read_text().splitlines()]
    assert [kind for kind, _ in marks] == ["start", "end"] * (len(marks) // 2), marks
    assert len(marks) >= 4


@pytest.mark.slow
def test_a_num_proc_map_of_a_reloaded_datasetdict_is_only_the_cascade(tmp_path: Path) -> None:
    """A script that rewrites its CSV before each run (the cause), saves the DatasetDict, loads it
    back and maps it with `num_proc=2`: the map differs only as the cascade of the load. It was
    also reported as differing "on its own" because of `num_proc`, which `datasets` does not hash
    (recorded only to say how the step ran, and in some runs only)."""
    script = tmp_path / "p.py"
    script.write_text(
        textwrap.dedent(
            """\
            from datasets import load_dataset, load_from_disk
            with open("d.csv", "w") as f:
                f.write("x\\n" + "".join(f"{i}\\n" for i in range(200)))
            d = load_dataset("csv", data_files={"train": "d.csv", "test": "d.csv"})
            d.save_to_disk("saved")
            load_from_disk("saved").map(lambda ex: {"y": ex["x"] + 1}, num_proc=2)
            """
        ),
        encoding="utf-8",
    )
    report = check_determinism(script, env=clean_env(tmp_path), cwd=tmp_path, rerun=False)
    assert report.analysis is not None and [c.kind for c in report.analysis.causes] == ["source"]
    assert report.analysis.masked == (), report.analysis.masked


@pytest.mark.slow
def test_entries_check_determinism_wrote_in_the_users_cache_say_what_made_them(tmp_path: Path) -> None:
    """check-determinism runs the script on the user's cache and records no lineage; `lineage` of
    what its runs wrote says so, and hints a command that works (it said "run the pipeline with
    `cachetool run`", which makes other fingerprints of a step that depends on PYTHONHASHSEED)."""
    from tests import forks

    (tmp_path / "d.csv").write_text("t\na\nb\nc\n", encoding="utf-8")
    script = tmp_path / "p.py"
    script.write_text(
        "from datasets import load_dataset\n"
        "stop = frozenset(['a', 'b', 'x', 'y', 'z'])\n"
        f"ds = load_dataset('csv', data_files={str(tmp_path / 'd.csv')!r}, split='train')\n"
        "ds.map(lambda e: {'s': e['t'] in stop})\n",
        encoding="utf-8",
    )
    env = {**clean_env(tmp_path), "COLUMNS": "300"}
    cli = [sys.executable, "-m", "cachetool"]
    checked = forks.run([*cli, "check-determinism", str(script)], env=env, capture_output=True, text=True)
    assert checked.returncode == 1, checked.stderr[-2000:]
    listed = json.loads(forks.run([*cli, "ls", "--json"], env=env, capture_output=True, text=True).stdout)
    derived = [e["fingerprint"] for e in listed["entries"] if e["kind"] == "derived"]
    assert len(derived) == 2  # one per PYTHONHASHSEED
    root = listed["root"]
    said = forks.run([*cli, "lineage", derived[0]], env=env, capture_output=True, text=True)
    assert said.returncode == 0, said.stderr
    assert "run the pipeline with `cachetool run`" not in said.stdout + said.stderr
    made = "no recorded run made it (a run without `cachetool run`, or `cachetool check-determinism`)"
    assert f"{derived[0]}: {made}" in said.stdout, said.stdout
    assert f"`cachetool gc {derived[0]} --min-age 0 --cache-dir {root}`" in said.stderr, said.stderr
    told = forks.run([*cli, "explain", derived[0]], env=env, capture_output=True, text=True)
    assert told.returncode == 2 and made in told.stderr, told.stderr
