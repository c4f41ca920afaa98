"""check-determinism never cries wolf: steps are aligned by identity (call site and lineage), never by
the order of events, so a warm run that records fewer of datasets' internal calls than a cold one
shifts nothing; an internal step is never a cause; a cause is observed (a fingerprint that differs),
never inferred; a report whose fingerprints all match has no cause and exits 0. Checked on real
pipelines of tests/corpus (k14: a ClassLabel cast, a split, a save and a reload; k15: a seeded
generator that reshuffles each epoch; c19: a real cause after a cached split) with the function
the command calls, in the default, `--no-cold` and `--isolated` modes, each report read both as the
command's JSON and as its text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cachetool.determinism.analysis import analyze
from cachetool.determinism.check import check_determinism
from cachetool.determinism.verdict import DeterminismReport, human_lines
from cachetool.errors import ExitCode
from tests.conftest import hf_env
from tests.corpus_pipeline import controls_report, once, write_pipeline

CORPUS = Path(__file__).parent / "corpus"
MODES: dict[str, dict[str, Any]] = {"default": {}, "no-cold": {"cold": False}, "isolated": {"isolated": True}}


def ev(op: str, line: int, result: str, parents: list[str], **kw: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "type": kw.pop("type", "transform"),
        "seq": kw.pop("seq", 0),
        "operation": op,
        "transform": f"datasets.arrow_dataset.Dataset.{op}",
        "result": result,
        "parents": parents,
        "internal": kw.pop("internal", False),
        "call_site": {"file": "/p/pipe.py", "line": line, "function": "<module>"},
        "args": kw.pop("args", {}),
        **kw,
    }


def test_a_warm_run_with_fewer_internal_events_compares_each_split_with_itself() -> None:
    """The cold run computes both splits' filters (each records an internal map and set_format);
    the warm run loads them and records neither. Every step is compared with the same step of the
    other run (train with train, test with test): all match, no cause, nothing left over but the
    cold run's internal calls."""
    cold = [
        ev("load_from_disk", 1, "tr", [], type="root"),
        ev("load_from_disk", 1, "te", [], type="root"),
        ev("filter", 2, "ftr", ["tr"]),
        ev("map", 2, "ftr", ["tr"], internal=True),
        ev("set_format", 2, "xtr", ["ftr"], internal=True),
        ev("filter", 2, "fte", ["te"]),
        ev("map", 2, "fte", ["te"], internal=True),
        ev("set_format", 2, "xte", ["fte"], internal=True),
        ev("map", 3, "mtr", ["ftr"]),
        ev("set_format", 3, "ytr", ["mtr"], internal=True),
        ev("map", 3, "mte", ["fte"]),
        ev("set_format", 3, "yte", ["mte"], internal=True),
    ]
    warm = [e for e in cold if not (e["internal"] and e["call_site"]["line"] == 2)]
    # The warm run's internal set_format after the map of the test split: its fingerprint is the
    # cold run's, its parent the test split's map. By order it would sit where the train's is.
    analysis = analyze([cold, warm])
    assert analysis.causes == ()
    assert all(not s.differs for s in analysis.steps)
    assert [(s.operation, s.results[0]) for s in analysis.steps if not s.internal] == [
        ("load_from_disk", "tr"),
        ("load_from_disk", "te"),
        ("filter", "ftr"),
        ("filter", "fte"),
        ("map", "mtr"),
        ("map", "mte"),
    ]
    # Internal calls only: no call the user made was recorded in one run only.
    assert analysis.unaligned == 4
    assert analysis.one_run_only == ()


def test_a_differing_internal_step_is_never_a_cause() -> None:
    """An internal `set_format` whose fingerprint differs while every step the user made matches is
    no cause: the report has 0 causes and exits 0 (its summary never says "0 differ; 1 cause")."""
    a = [
        ev("from_dict", 1, "r", [], type="root"),
        ev("map", 2, "m", ["r"]),
        ev("set_format", 2, "s1", ["m"], internal=True),
    ]
    b = [
        ev("from_dict", 1, "r", [], type="root"),
        ev("map", 2, "m", ["r"]),
        ev("set_format", 2, "s2", ["m"], internal=True),
    ]
    analysis = analyze([a, b])
    assert analysis.causes == () and analysis.masked == () and analysis.hidden_random == ()


def test_only_a_file_name_the_script_gives_anew_in_each_run_is_a_cause() -> None:
    """A map whose `cache_file_name` differs between runs (same fingerprint) is a `file-name`
    cause, its `num_proc` shards written there; the same name in every run, an internal step's
    own files, a name `datasets` did not use (a contiguous `select` writes no indices), or a step
    every run is told not to load (`load_from_cache_file=False`, its own note) are not."""

    def named(
        op: str, line: int, fp: str, parents: list[str], arg: str, path: str, **kw: Any
    ) -> dict[str, Any]:
        shards = [{"path": path.replace(".arrow", f"_0000{i}_of_00002.arrow")} for i in range(2)]
        return ev(op, line, fp, parents, named_files={arg: path}, files=kw.pop("files", shards), **kw)

    def run(folder: str) -> list[dict[str, Any]]:
        return [
            ev("load_from_disk", 1, "r", [], type="root"),
            named("map", 2, "m", ["r"], "cache_file_name", f"{folder}/out.arrow"),
            named("select", 2, "m", ["r"], "indices_cache_file_name", f"{folder}/i.arrow", internal=True),
            named("map", 3, "n", ["m"], "cache_file_name", "/data/fixed.arrow"),
            named("select", 4, "s", ["n"], "indices_cache_file_name", f"{folder}/s.arrow", files=[]),
            named(
                "map",
                5,
                "o",
                ["s"],
                "cache_file_name",
                f"{folder}/o.arrow",
                no_cache="load-from-cache-file-false",
            ),
        ]

    analysis = analyze([run("/tmp/tmpa"), run("/tmp/tmpb")])
    (cause,) = analysis.causes
    assert (cause.kind, cause.step.line, cause.differing_args) == ("file-name", 2, ("cache_file_name",))
    assert cause.file_names == (("cache_file_name", ("/tmp/tmpa/out.arrow", "/tmp/tmpb/out.arrow")),)
    assert analysis.differing == 0 and analysis.deterministic_causes == (cause,)


def test_a_step_seen_in_one_run_only_is_named() -> None:
    """A map the second run did not make is named as seen in some runs only, not compared with
    another step."""
    a = [ev("from_dict", 1, "r", [], type="root"), ev("map", 2, "m", ["r"]), ev("map", 3, "n", ["m"])]
    b = [ev("from_dict", 1, "r", [], type="root"), ev("map", 3, "n2", ["r"])]
    analysis = analyze([a, b])
    assert [(u.operation, u.line, u.run) for u in analysis.one_run_only] == [
        ("map", 2, 0),
        ("map", 3, 0),
        ("map", 3, 1),
    ]
    assert analysis.causes == ()


def check(script: str, base: Path, **options: Any) -> tuple[int, dict[str, Any], str]:
    """`check_determinism(SCRIPT, **options)` as `cachetool check-determinism SCRIPT` run in the
    corpus folder calls it (on the cache the script uses): exit code, and the one report as the
    command's JSON and as its text (with the warnings it prints on stderr)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(CORPUS)
        return read(check_determinism(CORPUS / script, env=hf_env(base), **options))


def read(report: DeterminismReport) -> tuple[int, dict[str, Any], str]:
    """A report's exit code, its JSON and its text (with its warnings), as the command prints them
    in the corpus folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(CORPUS)  # the text names files relative to the working folder, as the command's
        text = "\n".join([*human_lines(report), *report.warnings])
    return int(report.exit_code), json.loads(json.dumps(report.to_dict())), text


def assert_deterministic(code: int, report: dict[str, Any], text: str) -> None:
    assert code == ExitCode.OK, text
    assert report["verdict"] == "deterministic", text
    assert report["differences"] == [] and report["random_fingerprints"] == [], text
    assert all(t["status"] == "same" for t in report["transforms"] if not t["internal"]), text
    assert "0 differ" in text and "cause" not in text, text
    assert "only (the runs took different" not in text, text


#: The controls k14, k15 and k04, checked as one pipeline (tests/corpus_pipeline.py: each script
#: runs as `python kNN.py` would, one after the other in one interpreter).
CONTROLS = (
    "k14_classlabel_split_saved_reloaded.py",
    "k15_generator_reshuffles_each_epoch.py",
    "k04_seeded_shuffle.py",
)


@pytest.fixture(scope="module")
def controls(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`check` of the pipeline of CONTROLS in a mode, once per mode per session (however the
    tests are spread over workers); with `--isolated`, the pipeline of tests/corpus_pipeline.py
    `controls_report` (3 runs)."""

    def checked_in(mode: str) -> tuple[int, dict[str, Any], str]:
        if mode == "isolated":  # with the controls of tests/test_cmd_check_determinism.py
            return read(controls_report(tmp_path_factory)[1])

        def make(base: Path) -> tuple[int, dict[str, Any], str]:
            return check(str(write_pipeline(base / "controls.py", CONTROLS)), base, **MODES[mode])

        return once(tmp_path_factory, f"false-alarms-controls-{mode}", make)[1]

    return checked_in


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_classlabel_cast_split_save_and_reload_is_deterministic(mode: str, controls: Any) -> None:
    """csv -> cast_column(ClassLabel) -> train_test_split(seed=) -> save_to_disk -> load_from_disk ->
    map -> filter: plain reruns load every step from the cache, and check-determinism says so
    (exit 0, every fingerprint the same, no cause) in every mode (k14, in the pipeline of CONTROLS)."""
    code, report, text = controls(mode)
    assert_deterministic(code, report, text)
    k14 = str(CORPUS / CONTROLS[0])
    user = [t for t in report["transforms"] if not t["internal"] and t["call_site"]["file"] == k14]
    assert len(user) >= 12, text


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_seeded_generator_reshuffling_each_epoch_is_deterministic(mode: str, controls: Any) -> None:
    """`shuffle(generator=rng)` each epoch with one seeded generator: datasets draws from the
    generator on a cache hit too, so every run agrees; no cache-state cause is inferred from the
    generator's changed state (exit 0, "0 differ", no cause) in every mode (k15, in the pipeline
    of CONTROLS)."""
    code, report, text = controls(mode)
    assert_deterministic(code, report, text)
    k15 = str(CORPUS / CONTROLS[1])
    assert [t for t in report["transforms"] if not t["internal"] and t["call_site"]["file"] == k15], text


#: m12, c20 and c19, checked as one pipeline in the default mode (tests/corpus_pipeline.py): each
#: test reads the difference and the paragraph of the report its script's steps made.
HASHED = (
    "m12_cached_property_on_first_use.py",
    "c20_bucket_from_str_hash.py",
    "c19_cause_after_cached_split.py",
)


@pytest.fixture(scope="module")
def hashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    """`check` of the pipeline of HASHED, once per session."""

    def make(base: Path) -> tuple[int, dict[str, Any], str]:
        return check(str(write_pipeline(base / "hashed.py", HASHED)), base)

    return once(tmp_path_factory, "false-alarms-hashed", make)[1]


def difference_of(script: str, checked: tuple[int, dict[str, Any], str]) -> tuple[dict[str, Any], str]:
    """The one difference the steps of corpus `script` made in a `check` of a pipeline, and the
    paragraph of the text report about it (as one line, wherever the terminal wrapped it)."""
    code, report, text = checked
    assert code == ExitCode.PROBLEMS_FOUND, text
    mine = [d for d in report["differences"] if d["call_site"]["file"] == str(CORPUS / script)]
    assert len(mine) == 1, text
    (said,) = [p for p in text.split("\n\n") if p.startswith(f"{script}:")]
    return mine[0], " ".join(said.split())


@pytest.mark.slow
def test_a_cause_after_a_cached_split_is_found_on_its_own_split(
    hashed: tuple[int, dict[str, Any], str],
) -> None:
    """c19 in the default mode on an empty cache: the cold first run computes the filter and the
    split (recording their internal calls), the second loads them (recording fewer). The one cause
    is the test split's map with its frozenset; the train split's steps all match, each compared
    with itself; the test split's filter after it is its one downstream difference (c19, in the
    pipeline of HASHED, whose other two scripts make one cause each and nothing downstream)."""
    _, report, text = hashed
    assert [r["cold"] for r in report["runs"]] == [True, False]
    assert report["runs"][0]["events"] > report["runs"][1]["events"], text
    cause, said = difference_of(HASHED[2], hashed)
    source = (CORPUS / HASHED[2]).read_text().splitlines()
    assert source[cause["call_site"]["line"] - 1] == 'test = dd["test"].map(make_cleaner())', said
    assert cause["kind"] == "arguments" and cause["cascade"] == 1, said
    assert cause["culprits"][0]["path"] == ["closure 'stop'"], said
    c19 = str(CORPUS / HASHED[2])
    user = [t for t in report["transforms"] if not t["internal"] and t["call_site"]["file"] == c19]
    differing = [source[t["call_site"]["line"] - 1] for t in user if len(set(t["fingerprints"])) > 1]
    assert differing == [
        'test = dd["test"].map(make_cleaner())',
        'test = test.filter(lambda ex: len(ex["text"]) > 0)',
    ]
    for t in report["transforms"]:  # each run's parents are the same step's result in every run
        assert len({len(p) for p in t["parents"]}) == 1, t
    assert "only (the runs took different" not in text, text
    assert "4 differ; 3 cause(s), 1 downstream" in text, text


@pytest.mark.slow
def test_maps_of_an_in_memory_dataset_are_noted_as_running_again_every_time(controls: Any) -> None:
    """k04 maps a dataset built with `from_dict`: its map has no persistent cache and runs again in
    every session. The check says so in `explain`'s words (the reason and how to reuse it), as a
    note: the pipeline stays deterministic, exit 0; the JSON lists the step and its reason (k04, in
    the pipeline of CONTROLS, whose other steps are all cached)."""
    code, report, text = controls("default")
    assert code == ExitCode.OK, text
    assert "note: 1 step ran without a persistent cache; it runs again in every run" in text, text
    said = " ".join(text.split())  # as one line, wherever the terminal width wrapped it
    assert "(map <lambda> at k04_seeded_shuffle.py:8): in memory (Dataset.from_dict" in said, text
    assert "To reuse them across runs: save_to_disk the dataset" in text, text
    (entry,) = report["uncached"]
    assert entry["reason"] == "in-memory"
    assert report["transforms"][entry["step"]]["operation"] == "map"
    assert report["transforms"][entry["step"]]["call_site"]["file"] == str(CORPUS / CONTROLS[2])


# --- the culprit down to every differing leaf --------------------------------------------------


def node(
    label: str, digest: str, r: str, t: str = "int", children: list[Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"l": label, "t": t, "s": t, "r": r, "d": digest}
    if children:
        out["c"] = children
    return out


def test_a_value_set_on_first_use_is_named_as_present_in_some_runs_only() -> None:
    """An object that gains a `functools.cached_property` value on first use: the culprit is that
    attribute (absent in one run), of kind ``added`` with its own hint, not the whole object."""
    from cachetool.fingerprint.diff import diff_trees

    unit = node(".unit", "u", "'words'", "str")
    before = node("", "o1", "<Lengths>", "Lengths", [unit])
    after = node("", "o2", "<Lengths>", "Lengths", [unit, node(".scale", "s5", "5")])
    culprit = diff_trees("function", [before, after])
    assert culprit is not None
    (part,) = culprit.parts
    assert part.path == (".scale",) and part.kind == "added"
    assert part.values_str == "(absent) vs 5"
    assert "functools.cached_property" in part.hint


def test_two_dicts_that_differ_give_every_leaf_capped_with_a_count() -> None:
    """Two dicts of a function differ in 5 keys each: all 10 differing leaves are counted, the first
    few named, each with its own kind and hint."""
    from cachetool.determinism.verdict import Cause, Step, cause_lines
    from cachetool.fingerprint.diff import diff_trees

    def fn(offset: int) -> dict[str, Any]:
        def table(name: str) -> dict[str, Any]:
            keys = [node(f"['k{i}']", f"{name}{i}-{offset}", str(i + offset)) for i in range(5)]
            return node(f"closure '{name}'", f"{name}-{offset}", "{...}", "dict", keys)

        return node("", f"f{offset}", "<fn>", "function", [table("vocab"), table("inverse")])

    culprit = diff_trees("function", [fn(0), fn(1)])
    assert culprit is not None and len(culprit.leaves) == 10
    assert len(culprit.parts) == 6 and all(p.kind == "value" for p in culprit.parts)
    step = Step(0, (0, 0), "transform", "map", "t", "/p.py", 3, "fn", False, ("a", "b"), ((), ()))
    lines = cause_lines(Cause(step=step, kind="arguments", differing_args=("function",), culprits=(culprit,)))
    assert "  it differs in 10 places:" in lines
    assert "  - ... and 4 more" in lines
    assert "  - function → closure 'vocab'['k0'] (int): 0 vs 1" in lines


def test_a_hash_seed_value_never_reads_as_different_in_each_run() -> None:
    """A plain value that an equal hash seed reproduces: kind ``hash-seed``, a hint about the hash
    seed (in its parts too), never "different in each run"."""
    from cachetool.fingerprint.diff import diff_trees, seeded

    culprit = diff_trees("function", [node("", "a", "166"), node("", "b", "110")])
    assert culprit is not None and culprit.kind == "value" and "different in each run" in culprit.hint
    culprit = seeded(culprit)
    assert culprit.kind == "hash-seed" and "PYTHONHASHSEED" in culprit.hint
    assert "different in each run" not in culprit.hint


@pytest.mark.slow
def test_a_cached_property_filled_on_first_use_is_named_to_the_leaf(
    hashed: tuple[int, dict[str, Any], str],
) -> None:
    """m12: the map of the train split fills a `functools.cached_property` of the callable; the map
    of the test split hashes it again. The cache-state cause names the attribute, absent in the run
    that loaded the first map and set in the one that computed it."""
    cause, said = difference_of(HASHED[0], hashed)
    assert cause["kind"] == "cache-state", said
    assert "changed: function → .scale (int): (absent) vs 5" in said, said
    assert "functools.cached_property" in said, said


@pytest.mark.slow
def test_a_value_from_the_hash_seed_gets_a_hash_seed_hint(hashed: tuple[int, dict[str, Any], str]) -> None:
    """c20: a global taken from `hash()` of a string. The equal-seed run reproduces it, so the
    report says it follows PYTHONHASHSEED and gives the hash-seed hint, never "different in each
    run"."""
    cause, said = difference_of(HASHED[1], hashed)
    assert cause["variation"] == "PYTHONHASHSEED", said
    assert cause["culprits"][0]["kind"] == "hash-seed", said
    assert "this value follows PYTHONHASHSEED" in said and "different in each run" not in said, said
    assert "different in each run" not in hashed[2], hashed[2]


@pytest.mark.slow
def test_a_step_one_run_made_and_another_did_not_is_named_with_its_run(tmp_path: Path) -> None:
    """The first run makes a checkpoint the second does not (a marker file it leaves): the report
    names that step, its call site and the run that recorded it, and compares the others."""
    script = tmp_path / "paths.py"
    script.write_text(
        "import os\n"
        "from cachetool import checkpoint\n"
        "checkpoint('config', {'lr': 0.1})\n"
        f"if not os.path.exists({str(tmp_path / 'marker')!r}):\n"
        f"    open({str(tmp_path / 'marker')!r}, 'w').close()\n"
        "    checkpoint('first time only', 1)\n",
        encoding="utf-8",
    )
    env = hf_env(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", "check-determinism", str(script), "--json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == ExitCode.OK, proc.stderr
    assert report["one_run_only"] == [
        {
            "run": 1,
            "operation": "checkpoint",
            "call_site": {"file": str(script), "line": 6},
            "function": None,
            "count": 1,
        }
    ], report
    assert f"checkpoint at {script}:6 was recorded in run 1 only" in proc.stderr, proc.stderr
