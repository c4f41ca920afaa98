"""check-determinism's diagnosis on the corpus of tests/corpus (m*: objects a map changes, l*: values
a person must read, k09-k13: look-alike controls): hash trees are taken when `datasets` hashes, a
step that hashes an object an earlier step changed is named with the part that changed (datasets
issues #3638, #5985, #3847) in the default, warm-start and `--isolated` modes, culprits read as
what they are (a timestamp, a DataFrame cell, a generator given to the function, a column of an
in-memory source), an unpicklable pool is blamed on the part the exception names, and the script
sees the environment of a plain run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import xxhash

from cachetool.determinism.analysis import analyze
from cachetool.determinism.check import check_determinism
from cachetool.determinism.verdict import DeterminismReport, human_lines
from cachetool.errors import ExitCode
from cachetool.history.records.parts import ArgInfo
from tests.conftest import cachetool_run, copy_cache, hf_env
from tests.corpus_pipeline import causes_of, check_once, lines_of, once, shared_reports, shared_scripts

CORPUS = Path(__file__).parent / "corpus"

#: script -> (argument of the step that changes it, path below it, the mode it is checked in).
#: Each mode is covered by several classes; benchmarks/bench_corpus.py runs every pipeline of the
#: corpus in all three modes (m04 added tokens, m07 memo dict and m11 map-then-filter there only).
STATE_CHANGES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "m01_tokenizer_truncation_inside_map.py": ("function", ("global 'tok'", ".truncation"), "warm"),
    "m02_tokenizer_padding_two_calls.py": ("function", ("closure 'tok'", ".padding"), "default"),
    "m03_encoder_lazy_setup.py": ("function", (".tok", ".truncation"), "isolated"),
    "m05_lazy_vocab_global.py": ("function", ("global 'VOCAB'",), "default"),
    "m06_lazy_vocab_attribute.py": ("function", ("global 'tokenizer'", ".vocab"), "isolated"),
    "m08_counter_then_filter.py": ("function", ("global 'FREQ'",), "warm"),
    # Written from public reports before the check saw them (controls: uk12, uk13).
    "u12_lru_cache_first_use.py": ("function", (".table",), "default"),
    "u13_tokenizer_padding_in_map.py": ("fn_kwargs", ("['tok']", ".padding"), "default"),
    "m10_tokenizer_fn_kwargs.py": ("fn_kwargs", ("['tok']", ".truncation"), "isolated"),
}


@pytest.mark.slow
def test_no_cold_skips_the_recomputation_and_says_what_it_cannot_see(
    base: Path, m01_on_an_empty_cache: tuple[Path, DeterminismReport]
) -> None:
    """`--no-cold` / `cold=False` on a warm cache (a copy of the one the check of
    `m01_on_an_empty_cache` left, which a plain run loads in full): no run computes every step, so
    the tokenizer a map configures goes unseen (the trade-off its help states); the default run
    names it."""
    filled, _ = m01_on_an_empty_cache
    script = "m01_tokenizer_truncation_inside_map.py"
    report = check(script, base / "no-cold", "warm", cold=False, filled=filled)
    assert [run.cold for run in report.runs] == [False, False]
    assert report.exit_code == ExitCode.OK, "\n".join(human_lines(report))


@pytest.fixture(scope="module")
def m01_on_an_empty_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DeterminismReport]:
    """m01 checked in the default mode on an empty cache (<session>/empty-then-warm, once per
    session): its folder and the check."""
    return once(
        tmp_path_factory,
        "empty-then-warm",
        lambda where: check("m01_tokenizer_truncation_inside_map.py", where, "default"),
    )


@pytest.mark.slow
def test_an_empty_cache_is_enough_and_is_left_warm(
    m01_on_an_empty_cache: tuple[Path, DeterminismReport],
) -> None:
    """The default mode on an empty cache: the cold first run computes every step and writes its
    results where a plain run would, so the second run loads them. The tokenizer a map configures
    (m01, which needed a warm cache before) is named, and a plain run afterwards computes nothing:
    every cache file it uses was already there, unchanged."""
    where, report = m01_on_an_empty_cache
    text = "\n".join(human_lines(report))
    assert [run.cold for run in report.runs] == [True, False], text
    assert report.exit_code == ExitCode.PROBLEMS_FOUND, text
    assert report.analysis is not None
    (cause,) = report.analysis.deterministic_causes
    assert cause.kind == "cache-state", text
    cache = where / "cache"
    before = {p: p.stat().st_mtime_ns for p in cache.rglob("cache-*.arrow")}
    assert before, "the check left no cache file of the pipeline"
    proc = subprocess.run(
        [sys.executable, str(CORPUS / "m01_tokenizer_truncation_inside_map.py")],
        env=hf_env(where),
        cwd=CORPUS,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("cache-*.arrow")} == before


#: look-alikes: a tokenizer configured before the first map, a pre-warmed lazy vocabulary, a seeded
#: generator, a change nothing hashes again, a tokenizer that only encodes.
CONTROLS = {
    "k09_tokenizer_configured_before.py": "warm",
    "k10_prewarmed_vocab.py": "default",
    "k11_seeded_generator.py": "isolated",
    "k12_mutation_not_hashed_again.py": "warm",
    "k13_tokenizer_encode_only.py": "default",
    "uk12_lru_prewarmed.py": "default",
    "uk13_tokenizer_padding_before.py": "default",
}


#: A control checked by itself: its tokenizer, configured before the first map, is in the state
#: m01's tokenizer reaches inside its map (truncation at 4 tokens). In one interpreter, the analysis,
#: which knows a changed object again by its digest, would take k09's for the one m01 changed.
ALONE = {"k09_tokenizer_configured_before.py"}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache-state")


def check(
    script: str, where: Path, mode: str, cold: bool = True, filled: Path | None = None
) -> DeterminismReport:
    """check-determinism in `mode`: default (the script's cache, empty at first), warm (the same
    after a plain run filled it: the usual moment, a user who noticed a recompute) or isolated.
    The plain run of a script is made once, beside `where` (or `filled` is a folder whose cache
    the script already filled); each warm check starts on a copy of its cache, with its temp dir
    (where the corpus writes its data files, which key the cache)."""
    env = hf_env(where)
    if mode == "warm":
        filled = filled or where.parent / "plain-runs" / Path(script).name
        env["TMPDIR"] = hf_env(filled)["TMPDIR"]
        if not filled.exists():
            proc = subprocess.run(
                [sys.executable, str(CORPUS / script)],
                env=hf_env(filled),
                cwd=CORPUS,
                capture_output=True,
                timeout=120,
            )
            assert proc.returncode == 0, proc.stderr.decode()
        copy_cache(filled / "cache", where / "cache")
    return check_determinism(
        CORPUS / script, env=env, cwd=CORPUS, isolated=mode == "isolated", rerun=False, timeout=120, cold=cold
    )


def _fingerprint(parent: str, transform: Any, args: Mapping[str, ArgInfo]) -> str:
    """`datasets.fingerprint.update_fingerprint` recomputed from recorded digests: the parent, the
    transform, then each argument name and its value's digest (here: the root of its hash tree)."""
    from datasets.fingerprint import Hasher

    m = xxhash.xxh64()
    for value_type, digest in [
        (str(type(parent)), Hasher.hash(parent)),
        (str(type(transform)), Hasher.hash(transform)),
        *[
            item
            for key in sorted(args)
            for item in (
                (str(type(key)), Hasher.hash(key)),
                (f"<class '{args[key].type}'>", args[key].tree["d"]),
            )
        ],
    ]:
        m.update(f"=={value_type}==".encode())
        m.update(digest.encode())
    return str(m.hexdigest())


@pytest.mark.slow
def test_hash_trees_are_what_datasets_hashed_before_the_map_ran(
    m01_on_an_empty_cache: tuple[Path, DeterminismReport],
) -> None:
    """The map switches truncation on inside its function: the train split's tree shows the tokenizer
    as datasets hashed it (no truncation), its tree after the step shows the change, and every
    map's fingerprint is recomputed exactly from its trees' root digests. Read from the events of
    the cold run of `m01_on_an_empty_cache` (it computes both maps, as a plain run on an empty
    cache does)."""
    _, report = m01_on_an_empty_cache
    assert report.runs[0].cold
    maps = [e for e in report.runs[0].events if e.operation == "map"]
    assert [m.split for m in maps] == ["train", "test"]
    for event in maps:
        for entry in event.args.values():
            assert entry.tree is not None and entry.tree["d"] == entry.digest
        transform = event.transform
        assert _fingerprint(event.parents[0], transform, event.args) == event.result

    def truncation(tree: dict[str, Any]) -> str:
        tok = next(c for c in tree["c"] if c["l"] == "global 'tok'")
        return str(next(c for c in tok["c"] if c["l"] == ".truncation")["r"])

    train, test = (m.args["function"] for m in maps)
    assert truncation(train.tree) == "None"  # type: ignore[arg-type]
    assert truncation(train.after).startswith("{'direction': 'Right', 'max_length': 4")  # type: ignore[arg-type]
    assert truncation(test.tree) == truncation(train.after)  # type: ignore[arg-type]
    assert test.after is None  # configuring it again changes nothing


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(STATE_CHANGES))
def test_a_step_that_hashes_what_an_earlier_step_changed_is_named(
    script: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The step whose fingerprint depends on whether an earlier one was computed or loaded is a
    cache-state cause, with the step that changes the object and the part that changed; it is never
    called "changes on every run". Found in the default, warm-start and --isolated modes (read
    from the report on `PIPELINES[mode]`: the step that changed the object is one of the script's
    own)."""
    argument, path, mode = STATE_CHANGES[script]
    report, checked = pipeline_report(mode, tmp_path_factory), checked_in(mode)
    text = "\n".join(lines_of(script, report, checked))
    assert report.exit_code == ExitCode.PROBLEMS_FOUND, text
    (cause,) = causes_of(script, report, checked)
    assert cause.kind == "cache-state" and cause.variation == "cache state", text
    (culprit,) = cause.culprits
    assert culprit.argument == argument
    # One changed part, or several (a callable's `.ready` flag and its tokenizer's truncation).
    changed = [culprit.path, *(part.path for part in culprit.parts)]
    assert any(p[: len(path)] == path for p in changed), text
    assert culprit.kind == "cache-state"
    assert cause.changed_by is not None and cause.changed_by.index < cause.step.index
    assert cause.changed_by.file == cause.step.file
    assert "and one that loaded it from the cache" in text
    assert "changes on every run" not in text and "no hash tree recorded" not in text
    assert "build and configure" in culprit.hint and "datasets/issues/3638" in culprit.hint
    if script.startswith("u12"):
        # A table filled on first use: six of its keys, and how many more.
        assert culprit.path == (".table",) and len(culprit.parts) == 6
        assert f"  ... and {len(culprit.leaves) - 6} more changed" in text.splitlines()
    if script.startswith("m01"):
        # On a warm cache: the tokenizer's truncation before and after the step, and the fix.
        lines = text.splitlines()
        assert any(
            line.startswith(
                "  changed: function → global 'tok' → .truncation (NoneType): None vs {'direction'"
            )
            for line in lines
        ), lines
        assert any("the tokenizer completely before the first map" in line for line in lines)
        assert any("a run that computed step 3 (map tokenize on split train at " in line for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(set(CONTROLS.values())))
def test_look_alike_controls_stay_deterministic(
    mode: str, base: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A tokenizer configured before the first map, a pre-warmed vocabulary, a seeded generator, a
    change nothing hashes again, a tokenizer that only encodes: no cause of any kind in their
    steps, with at least two of each compared. Read from the report on `PIPELINES[mode]` (k09,
    `ALONE`, from a check of its own)."""
    for name in sorted(name for name, m in CONTROLS.items() if m == mode):
        if name in ALONE:
            report, checked = check(name, base / name, mode), [name]
        else:
            report, checked = pipeline_report(mode, tmp_path_factory), checked_in(mode)
        said = "\n".join(lines_of(name, report, checked))
        assert not causes_of(name, report, checked), said
        assert not causes_of(name, report, checked, random=True), said
        assert report.analysis is not None
        assert len([s for s in report.analysis.steps if s.file == str(CORPUS / name)]) >= 2


def _event(line: int, result: str, parents: list[str], args: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "transform",
        "operation": "map",
        "transform": "t",
        "result": result,
        "parents": parents,
        "internal": False,
        "call_site": {"file": "/p/pipe.py", "line": line},
        "args": args,
    }


def _node(
    label: str, digest: str, r: str, t: str = "dict", children: list[Any] | None = None
) -> dict[str, Any]:
    node: dict[str, Any] = {"l": label, "t": t, "s": t, "r": r, "d": digest}
    if children:
        node["c"] = children
    return node


def test_a_change_nobody_hashes_again_is_not_a_cause() -> None:
    """Only a later hash of the changed object makes a fingerprint depend on the cache state: the
    same change with no later step hashing it is no cause. A later step that hashes it is a cause
    only where observed: when a run that loaded the changing step gives another fingerprint there;
    when every run computed it and all agree, it is a note, not a cause (fast, on hand-written
    events)."""
    before = _node("", "f0", "<f>", "function", [_node("global 'tok'", "t0", "<tok>", "Tokenizer")])
    after = _node("", "f1", "<f>", "function", [_node("global 'tok'", "t1", "<tok>", "Tokenizer")])
    changed = {"function": {"digest": "f0", "tree": before, "after": after}}
    loaded = {"function": {"digest": "f0", "tree": before}}
    other = {"function": {"digest": "g0", "tree": _node("", "g0", "<g>", "function")}}
    computed = _event(1, "a", ["p"], changed) | {"cache": "miss"}
    runs = [[computed, _event(2, "b", ["a"], other)] for _ in range(2)]
    assert analyze(runs).causes == () and analyze(runs).unobserved == ()

    def again(tok: str) -> dict[str, Any]:
        tree = _node("", f"h-{tok}", "<h>", "function", [_node("global 'tok'", tok, "<tok>", "Tokenizer")])
        return {"function": {"digest": f"h-{tok}", "tree": tree}}

    # A later step hashes the tokenizer (through another function); every run computed step 1.
    runs = [[computed, _event(2, "b", ["a"], again("t1"))] for _ in range(2)]
    analysis = analyze(runs)
    assert analysis.causes == ()
    (note,) = analysis.unobserved
    assert note.kind == "cache-state" and note.step.line == 2
    # The second run loaded step 1 (the tokenizer stays as it was) and hashed it again: observed.
    warm = [_event(1, "a", ["p"], loaded) | {"cache": "hit"}, _event(2, "c", ["a"], again("t0"))]
    analysis = analyze([runs[0], warm])
    (cause,) = analysis.causes
    assert analysis.unobserved == ()
    assert cause.kind == "cache-state" and cause.step.line == 2 and cause.changed_by is not None
    assert cause.changed_by.line == 1
    assert cause.culprits[0].path == ("global 'tok'",)
    assert json.dumps(cause.to_dict())  # the JSON form carries it


#: script -> (argument, path below it, culprit kind, text the report must contain)
LEAVES: dict[str, tuple[str, tuple[str, ...], str, str]] = {
    "l01_datetime_fn_kwargs.py": ("fn_kwargs", ("['as_of']",), "timestamp", "a timestamp (datetime)"),
    "l02_dataframe_closure.py": (
        "function",
        ("closure 'table'", "['fetched']"),
        "timestamp",
        "['fetched'][0] (float): ",
    ),
    "l03_unseeded_rng_fn_kwargs.py": ("fn_kwargs", ("['rng']",), "random-state", "reaches the function"),
}


#: The pipelines of this file, checked as one per mode (tests/corpus_pipeline.py: each runs as under
#: `python xNN.py`, in one interpreter; the isolated and default ones in `shared_reports`, with
#: the scripts other files check in those modes). Checked alone (2 runs, hash seeds 1 and 2), each
#: of them gave what it gives in its mode's pipeline: the cause's kind, argument, culprit path and
#: kind, the step that changed the object, the source that differs, the unpicklable piece, and no
#: cause for a control. m01 comes first in the warm one: its test reads the number of the step that
#: changed the tokenizer. Checked apart: m01 on an empty cache (`m01_on_an_empty_cache`) and `ALONE`.
PIPELINES: dict[str, list[str]] = {
    "isolated": sorted(
        [
            *(name for name, (_, _, mode) in STATE_CHANGES.items() if mode == "isolated"),
            *LEAVES,
            "l04_from_pandas_root.py",
            "l05_function_from_generated_file.py",
            *(name for name, mode in CONTROLS.items() if mode == "isolated"),
        ]
    ),
    "default": sorted(
        [
            *(name for name, (_, _, mode) in STATE_CHANGES.items() if mode == "default"),
            "m09_threadpool_global.py",
            "i01_split_without_seed.py",
            *(name for name, mode in CONTROLS.items() if mode == "default"),
        ]
    ),
    "warm": [
        *sorted(name for name, (_, _, mode) in STATE_CHANGES.items() if mode == "warm"),
        *sorted(name for name, mode in CONTROLS.items() if mode == "warm" and name not in ALONE),
    ],
}
_PIPELINE_REPORTS: dict[str, DeterminismReport] = {}


def pipeline_report(mode: str, tmp_path_factory: pytest.TempPathFactory) -> DeterminismReport:
    """The report on `PIPELINES[mode]`, checked in `mode` once per session: in the isolated and
    default modes, in the pipeline of tests/corpus_pipeline.py `shared_reports` (with the scripts
    other files check in that mode; in the default mode, its check on an empty cache)."""
    if mode not in _PIPELINE_REPORTS:
        if mode in ("isolated", "default"):
            _, _, (report, *_) = shared_reports(tmp_path_factory, mode)
        else:

            def check_in_mode(script: Path, folder: Path) -> DeterminismReport:
                return check(str(script), folder, mode)

            _, report = check_once(tmp_path_factory, f"corpus-{mode}", PIPELINES[mode], check_in_mode)
        _PIPELINE_REPORTS[mode] = report
    return _PIPELINE_REPORTS[mode]


def checked_in(mode: str) -> list[str]:
    """The scripts of the pipeline `pipeline_report(mode)` is on."""
    return PIPELINES[mode] if mode == "warm" else shared_scripts(mode)


@pytest.fixture(scope="module")
def isolated_report(tmp_path_factory: pytest.TempPathFactory) -> DeterminismReport:
    return pipeline_report("isolated", tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(LEAVES))
def test_culprits_read_as_what_they_are(script: str, isolated_report: DeterminismReport) -> None:
    """A datetime shows as ISO text with a timestamp hint, a DataFrame by the column and row of the
    cells that differ, an unseeded generator in fn_kwargs gets a generator hint (not a shuffle one).
    Read from `isolated_report`: the script's own cause and its lines."""
    argument, path, kind, text = LEAVES[script]
    report = isolated_report
    lines = "\n".join(lines_of(script, report, checked_in("isolated")))
    assert report.exit_code == ExitCode.PROBLEMS_FOUND, lines
    (cause,) = causes_of(script, report, checked_in("isolated"))
    (culprit,) = cause.culprits
    assert (culprit.argument, culprit.path, culprit.kind) == (argument, path, kind), lines
    assert text in lines
    assert "bytes of" not in lines and "shuffle" not in lines


@pytest.mark.slow
def test_an_in_memory_source_names_the_column_and_first_value(isolated_report: DeterminismReport) -> None:
    """from_pandas of a frame with a column filled at run time: the column and its first value
    (l04, in `isolated_report`)."""
    script, report = "l04_from_pandas_root.py", isolated_report
    (cause,) = causes_of(script, report, checked_in("isolated"))
    assert cause.kind == "source" and cause.step.operation == "from_pandas"
    (key, values), *_ = cause.source_diffs
    assert key == "column 'loaded_at' row 0" and len(set(values)) == len(report.runs)  # one per run
    lines = lines_of(script, report, checked_in("isolated"))
    assert any(line.startswith("  source column 'loaded_at' row 0: ") for line in lines)


@pytest.mark.slow
def test_an_unpicklable_pool_is_blamed_on_its_work_queue(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A ThreadPoolExecutor in a global: the part datasets failed on and its real exception, not a
    RecursionError on the threads the map started. Read from the report on `PIPELINES["default"]`:
    no fingerprint of m09's steps differs but by the random fallback (alone, it exits 3)."""
    script, report, checked = (
        "m09_threadpool_global.py",
        pipeline_report("default", tmp_path_factory),
        checked_in("default"),
    )
    lines = "\n".join(lines_of(script, report, checked))
    assert not causes_of(script, report, checked), lines
    (cause,) = causes_of(script, report, checked, random=True)
    piece = cause.unpicklable[0]
    assert piece.path_str == "function → global 'POOL' → ._work_queue (SimpleQueue)"
    assert piece.error == "TypeError: cannot pickle '_queue.SimpleQueue' object"
    assert "RecursionError" not in lines


ENVIRONMENT = """
import json, os, subprocess, sys
import cachetool
seen = {k: v for k, v in os.environ.items() if k.startswith("CACHETOOL_") or k == "PYTHONHASHSEED"}
child = [sys.executable, "-c", "import os; print(os.environ.get('CACHETOOL_CHECK_RUN', ''))"]
inherited = subprocess.run(child, capture_output=True, text=True, check=True).stdout.strip()
with open(os.path.join(sys.argv[1], f"{os.getpid()}.json"), "w") as f:
    json.dump({"seen": seen, "inherited": inherited}, f)
cachetool.checkpoint("config", {"lr": 0.1})
cachetool.checkpoint("environment", dict(os.environ))
"""


@pytest.mark.slow
@pytest.mark.parametrize("user_seed", [None, "7"])
def test_the_script_sees_the_environment_of_a_plain_run(user_seed: str | None, tmp_path: Path) -> None:
    """The variables the check sets for a run are gone from the script's os.environ, PYTHONHASHSEED is
    the user's own (or absent), the user's CACHETOOL_HOME stays, and checkpoints still record: a
    snapshot of the whole environment hashes alike in every run. The run marker is out of
    os.environ too, yet stays in the process's environment, which every process the run starts
    inherits, so that what a timed-out run leaves (a double-forked daemon) can be found and
    stopped."""
    script = tmp_path / "env_script.py"
    script.write_text(ENVIRONMENT)
    out = tmp_path / "seen"
    out.mkdir()
    env = hf_env(tmp_path)
    if user_seed is not None:
        env["PYTHONHASHSEED"] = user_seed
    report = check_determinism(script, [str(out)], env=env, rerun=False, timeout=120)
    assert report.exit_code == ExitCode.OK, "\n".join(human_lines(report))
    assert report.analysis is not None and len(report.analysis.steps) == 2
    said = [json.loads(p.read_text()) for p in sorted(out.iterdir())]
    inherited = {s["inherited"] for s in said}
    assert len(inherited) == 2 and all(m.startswith(f"{os.getpid()}-") for m in inherited), said
    expected = {"CACHETOOL_HOME": env["CACHETOOL_HOME"]}
    if user_seed is not None:
        expected["PYTHONHASHSEED"] = user_seed
    assert [s["seen"] for s in said] == [expected, expected]


@pytest.mark.slow
def test_internal_steps_are_never_a_cause_and_the_counts_agree(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """train_test_split without a seed: the split is the one cause; the `select(new_fingerprint=)`
    datasets makes inside it is not blamed; its test output and the two maps are downstream, and
    the counts add up (compared steps are the user's own). Read from the report on
    `PIPELINES["default"]`: the steps i01 called."""
    script, report, checked = (
        "i01_split_without_seed.py",
        pipeline_report("default", tmp_path_factory),
        checked_in("default"),
    )
    lines = lines_of(script, report, checked)
    assert report.analysis is not None
    (cause,) = causes_of(script, report, checked)
    assert cause.step.operation == "train_test_split" and cause.differing_args == ("generator",)
    assert cause.culprits[0].kind == "random-state" and "seed=" in cause.culprits[0].hint
    assert cause.cascade == 3
    mine = [s for s in report.analysis.steps if s.file == str(CORPUS / script)]
    number = report.analysis.causes.index(cause)
    assert mine and all(s.cause == number for s in mine if s.differs)
    # The script's own four steps (its loads are called in corpus_data.py) differ: the cause and
    # its cascade, no more.
    user = [s for s in mine if not s.internal]
    assert len(user) == len([s for s in user if s.differs]) == 1 + cause.cascade == 4
    assert not any("new_fingerprint" in line for line in lines), lines


ARGV_AND_PROGRESS = """
import sys, time
import cachetool
cachetool.checkpoint("argv", sys.argv[1:])
if "--hang" in sys.argv:
    sys.stderr.write("loading reviews.csv\\nbuilding vocabulary\\n")
    for i in range(0, 101, 25):
        sys.stderr.write(f"\\rMap: {i:3d}%|{'#' * (i // 10):10s}| {i}/100 [00:01<00:00, 95.1 examples/s]")
        sys.stderr.flush()
    time.sleep(60)
"""


@pytest.fixture(scope="module")
def argv_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("argv") / "prepare.py"
    path.write_text(ARGV_AND_PROGRESS)
    return path


@pytest.mark.slow
def test_script_arguments_pass_through_without_a_double_dash(
    argv_script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with `cachetool run`: what follows the script and is not an option of check-determinism
    reaches the script, in order; check-determinism's own options may still follow the script."""
    from typer.testing import CliRunner

    from cachetool.cli.app import app

    for key, value in hf_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    args = ["check-determinism", str(argv_script), "--split", "train", "--max-rows=10", "--hash-seeds", "3,4"]
    result = CliRunner().invoke(app, [*args, "--json", "x.csv"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["args"] == ["--split", "train", "--max-rows=10", "x.csv"]
    assert doc["variations"]["hash_seeds"] == [3, 4]


@pytest.mark.slow
def test_progress_is_reported_per_run(argv_script: Path, tmp_path: Path) -> None:
    """Each run reports while it goes and once at its end, with the steps it recorded so far."""
    from cachetool.determinism.verdict import RunProgress

    seen: list[RunProgress] = []
    report = check_determinism(argv_script, ["a"], env=hf_env(tmp_path), progress=seen.append, timeout=120)
    assert report.exit_code == ExitCode.OK
    finished = [p for p in seen if p.finished]
    assert [(p.index, p.hash_seed, p.cold, p.steps) for p in finished] == [(0, 1, True, 1), (1, 2, False, 1)]


@pytest.mark.slow
def test_a_timeout_shows_the_scripts_last_real_lines(argv_script: Path, tmp_path: Path) -> None:
    """On --timeout, the stderr tail is what the terminal last showed, without progress-bar redraws."""
    # The lines must be written before the timeout: from the run's turn (its interpreter waiting,
    # no datasets) through `import cachetool` and the checkpoint to the last line took 0.26-0.41 s
    # with the machine's load at 6-8 on 2 cores, so 2 s leaves five times that.
    report = check_determinism(argv_script, ["--hang"], env=hf_env(tmp_path), timeout=2)
    assert report.exit_code == ExitCode.USAGE
    assert report.failed_run is not None and report.failed_run.timed_out
    assert report.failed_run.stderr_tail.splitlines()[-2:] == ["loading reviews.csv", "building vocabulary"]
    assert "%|" not in "\n".join(human_lines(report))


def test_terminal_lines_keep_what_a_terminal_shows() -> None:
    from cachetool.determinism.process import terminal_lines

    bar = "Map:  0%|   | 0/4 [00:00<?, ? examples/s]\rMap: 100%|###| 4/4 [00:00<00:00, 9.1 examples/s]"
    text = f"a\n{bar}\nb\r c\n"
    assert terminal_lines(text) == ["a", " c"]


RENAMED = """
import sys
from datasets import load_dataset


def clean(example):
    return {"t": example["text"].lower()}


ds = load_dataset("json", data_files=sys.argv[1], split="train").map(clean)
print(ds._fingerprint)
"""


@pytest.mark.slow
def test_explain_says_the_script_was_renamed(tmp_path: Path) -> None:
    """pipeline.py copied to pipeline_b.py recomputes its map (dill keeps the file name): explain
    names the file change instead of "first time this step ran"."""
    from cachetool.history.explain.explainer import explain_fingerprint

    env = hf_env(tmp_path)
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "A"}\n{"text": "B"}\n')
    fingerprints = []
    for name in ("pipeline.py", "pipeline_b.py"):
        (tmp_path / name).write_text(RENAMED)
        proc = cachetool_run(name, str(data), env=env, cwd=tmp_path, timeout=120, warm=True)
        fingerprints.append(proc.stdout.split()[-1])
    assert fingerprints[0] != fingerprints[1]
    report = explain_fingerprint(env["HF_DATASETS_CACHE"], fingerprints[1])
    (reason,) = report.steps[0].reasons
    assert reason.kind == "source-file", reason
    assert "is the same but its source file changed (pipeline.py → pipeline_b.py)" in reason.message


@pytest.mark.slow
def test_a_function_from_a_per_run_file_names_the_file(isolated_report: DeterminismReport) -> None:
    """check-determinism: the function's code differs only by the file name datasets keeps (l05, in
    `isolated_report`)."""
    (cause,) = causes_of("l05_function_from_generated_file.py", isolated_report, checked_in("isolated"))
    (culprit,) = cause.culprits
    assert culprit.path == ("code", "filename") and culprit.kind == "source-file"
    assert "the function is the same but its source file changed (prep_" in culprit.hint


@pytest.mark.slow
def test_everyday_tracing_builds_no_hash_tree(base: Path) -> None:
    """`cachetool run` (the ledger) keeps bounded summaries only: no hash tree at hash time, no
    tree after the step, no column heads; those are for check-determinism's runs."""
    env = hf_env(base / "everyday")
    cachetool_run("m01_tokenizer_truncation_inside_map.py", env=env, cwd=CORPUS, timeout=120, warm=True)
    segments = list(Path(env["HF_DATASETS_CACHE"]).glob(".cachetool/**/*.jsonl"))
    records = [json.loads(line) for seg in segments for line in seg.read_text().splitlines() if line]
    maps = [r for r in records if r.get("type") == "transform" and r.get("operation") == "map"]
    assert len(maps) == 2
    for rec in maps:
        for entry in rec["args"].values():
            assert "tree" not in entry and "after" not in entry
    assert any("summary" in entry for rec in maps for entry in rec["args"].values())
