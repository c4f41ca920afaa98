"""Tracing real pipelines: what `cachetool run` and `cachetool.tracing()` record, checked against the
fingerprints `datasets` itself reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests.conftest import cachetool_run, shared_session_dir
    from tests.lineage_pipeline import PIPELINE, PipelineRuns, pipeline_runs, subprocess_env
except ImportError:
    from conftest import cachetool_run, shared_session_dir  # type: ignore[no-redef]
    from lineage_pipeline import PIPELINE, PipelineRuns, pipeline_runs, subprocess_env  # type: ignore[no-redef]

from cachetool.history.graph import StepGraph
from cachetool.history.ledger import read_ledger
from cachetool.history.lineage_view import load_graph
from cachetool.history.records.steps import StepRecord

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> PipelineRuns:
    return pipeline_runs(shared_session_dir(tmp_path_factory) / "lineage")


@pytest.fixture
def graph(runs: PipelineRuns, monkeypatch: pytest.MonkeyPatch) -> StepGraph:
    monkeypatch.setenv("CACHETOOL_HOME", runs.env["CACHETOOL_HOME"])
    warnings: list[str] = []
    g = load_graph(runs.cache, warnings=warnings)
    assert warnings == []
    return g


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_fingerprints_under_cachetool_run_equal_plain_python(runs: PipelineRuns) -> None:
    """The hooks never change a fingerprint: every step of the traced run (and of the events-file
    run) has the fingerprint a plain `python pipeline.py` gives, except the one that `datasets`
    itself made random. Fork (map num_proc=2) and spawn (save_to_disk num_proc=2) pools ran in the
    traced runs; the plain run saved in its own process, which changes no fingerprint."""
    names = set(runs.fps) - {"random"}
    assert {k: runs.fps[k] for k in names} == {k: runs.plain_fps[k] for k in names}
    assert {k: runs.events_fps[k] for k in names} == {k: runs.plain_fps[k] for k in names}
    assert runs.fps["random"] != runs.plain_fps["random"]
    assert "cachetool: warning" not in runs.stderr


def test_each_chain_matches_the_fingerprints_datasets_reports(runs: PipelineRuns, graph: StepGraph) -> None:
    """The chain of every step, from its source, is exactly the sequence of `ds._fingerprint`s
    the script saw, across the saved folder and back into the cache root."""
    fp = runs.fps
    chain = ["csv", "map", "batched", "num_proc", "filter", "shuffle", "sort", "train"]
    assert graph.ancestors(fp["remove_columns"]) == [fp[k] for k in [*chain, "remove_columns"]]
    assert graph.ancestors(fp["loaded_map"]) == [
        fp[k] for k in [*chain, "remove_columns", "loaded", "loaded_map"]
    ]
    assert graph.ancestors(fp["select"]) == [
        fp[k] for k in ["csv", "map", "batched", "num_proc", "filter", "select"]
    ]
    assert graph.ancestors(fp["test"]) == [fp[k] for k in [*chain[:-1], "test"]]
    assert graph.ancestors(fp["concat"]) == [fp[k] for k in [*chain, "test", "concat"]]
    assert graph.ancestors(fp["new_fp"]) == [fp["csv"], fp["map"], "my-step-1"]
    assert graph.ancestors(fp["mem_map"]) == [fp["mem_root"], fp["mem_map"]]
    for source in ("json", "parquet"):
        assert graph.ancestors(fp[source]) == [fp[source]]
    # Two branches (and more) from one source.
    assert set(graph.children(fp["csv"])) == {fp[k] for k in ("map", "branch1", "branch2", "random")}
    assert set(graph.children(fp["map"])) == {fp["batched"], "my-step-1"}


def test_operations_functions_arguments_and_files(runs: PipelineRuns, graph: StepGraph) -> None:
    """Each step says what it was, which user function ran (name, file, line, source hash), its
    small arguments, and the cache files it wrote; steps that write no file say so."""
    fp = runs.fps
    step = {name: graph.step(fp[name]) for name in fp}
    ops = {name: s.operation for name, s in step.items()}
    assert ops == {
        "csv": "load_dataset",
        "json": "load_dataset",
        "parquet": "load_dataset",
        "map": "map",
        "batched": "map",
        "num_proc": "map",
        "filter": "filter",
        "select": "select",
        "shuffle": "shuffle",
        "sort": "sort",
        "train": "train_test_split",
        "test": "train_test_split",
        "remove_columns": "remove_columns",
        "loaded": "load_from_disk",
        "loaded_map": "map",
        "concat": "concatenate_datasets",
        "new_fp": "map",
        "branch1": "filter",
        "branch2": "map",
        "random": "map",
        "mem_root": "from_dict",
        "mem_map": "map",
    }
    assert step["csv"].source is not None and step["csv"].source.builder == "csv"
    assert step["csv"].source.split == "train" and step["csv"].type == "root"
    fn = step["map"].function
    assert fn is not None and fn.qualname == "add_len"
    assert fn.file == str(runs.script) and fn.line == _line_of(PIPELINE, "def add_len")
    assert str(fn.source_hash).startswith("sha256:")
    assert step["map"].call_site is not None and step["map"].call_site.to_json() == {
        "file": str(runs.script),
        "line": _line_of(PIPELINE, "csv.map(add_len)"),
        "function": "<module>",
    }
    assert dict(step["batched"].args) == {"batch_size": "8", "batched": "True"}
    assert dict(step["select"].args) == {"indices": "[3, 1, 2, 0]"}
    assert dict(step["train"].args)["seed"] == "0"
    train, test = step["train"].record, graph.step(fp["test"]).record
    assert train is not None and train.output == "train" and test is not None
    assert test.args["fingerprint_name"].repr == "'test_new_fingerprint'"
    assert train.args["fingerprint_name"].repr == "'train_new_fingerprint'"
    shards = [Path(f.path).name for f in step["num_proc"].files]
    assert shards == [f"cache-{fp['num_proc']}_0000{r}_of_00002.arrow" for r in (0, 1)]
    assert step["num_proc"].cache == "miss" and all(f.exists for f in step["num_proc"].files)
    for name in ("select", "remove_columns", "concat"):
        assert step[name].files == () and step[name].cache == "none" and step[name].file_str == "no file"
    assert step["mem_map"].in_memory and step["mem_map"].file_str == "no file (in memory)"
    assert [Path(f.path).name for f in step["loaded_map"].files] == [f"cache-{fp['loaded_map']}.arrow"]
    assert Path(step["loaded_map"].files[0].path).parent == runs.saved  # a saved folder is a root
    assert step["remove_columns"].saved_to == (str(runs.saved),)
    assert step["new_fp"].fingerprint_given and step["new_fp"].transform is None
    assert step["map"].transform == "datasets.arrow_dataset.Dataset._map_single"
    assert step["filter"].transform == "datasets.arrow_dataset.Dataset.filter@2.0.1"


def test_an_unhashable_function_is_recorded_as_a_random_fallback(
    graph: StepGraph, runs: PipelineRuns
) -> None:
    """A function closing over a generator cannot be pickled: the record names the argument and
    the exception text `datasets` swallowed before making the fingerprint up."""
    s = graph.step(runs.fps["random"])
    assert s.random_fallback is not None and s.random_fallback.to_json() == {
        "argument": "function",
        "error": "cannot pickle 'generator' object",
        "error_type": "TypeError",
    }
    assert s.function is not None and s.function.qualname == "make_unhashable.<locals>.tag"
    assert graph.step(runs.fps["map"]).random_fallback is None


def test_internal_calls_are_recorded_but_hidden_by_default(runs: PipelineRuns) -> None:
    """`set_format` inside map and the per-shard `select` of a num_proc map are in the ledger,
    marked internal; the lineage graph leaves them out unless asked."""
    ledger = read_ledger(runs.cache)
    internal = [r for r in ledger.records if r.internal]
    assert {"set_format", "select"} <= {getattr(r, "operation", None) for r in internal}
    steps = read_ledger(runs.cache).steps(include_internal=True)
    assert all(not r.internal for r in steps if r.result == runs.fps["map"] and r.operation == "map")
    shown = StepGraph(ledger)
    assert all(not r.internal for r in shown.steps)
    with_internal = StepGraph(ledger, include_internal=True)
    assert len(with_internal.steps) == sum(r.type not in ("save", "checkpoint") for r in steps)


def test_records_carry_run_host_pid_versions_and_timing(runs: PipelineRuns) -> None:
    records = [*read_ledger(runs.cache).steps(include_internal=True), *read_ledger(runs.saved).steps()]
    assert len({r.run for r in records}) == 1 and len({r.pid for r in records}) == 1
    r = records[0]
    assert r.v == 1 and r.host and isinstance(r.time, float) and r.duration >= 0
    assert set(r.versions) >= {"python", "datasets", "dill", "pyarrow", "cachetool"}
    assert all(rec.root in (str(runs.cache), str(runs.saved)) for rec in records)
    assert {rec.root for rec in records if rec.operation in ("save_to_disk", "load_from_disk")} == {
        str(runs.saved)
    }


EVENT_KEYS = {
    "v",
    "type",
    "seq",
    "operation",
    "transform",
    "result",
    "parents",
    "internal",
    "call_site",
    "function",
    "args",
    "random_fallback",
}


def test_events_file_mode_writes_every_event_there_and_not_to_the_ledger(runs: PipelineRuns) -> None:
    """The determinism runner's contract: with CACHETOOL_TRACE_EVENTS every event goes to that file,
    in call order (`seq`), with the documented keys; CACHETOOL_TRACE_TREES=1 adds a hash tree per
    argument. The cache root gets no ledger."""
    events = runs.events()
    assert not (runs.events_run / "cache" / ".cachetool").exists()
    assert not (runs.events_run / "saved" / ".cachetool").exists()
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for e in events:
        assert set(e) >= EVENT_KEYS, EVENT_KEYS - set(e)
        assert e["type"] in ("transform", "root", "save") and isinstance(e["internal"], bool)
        assert isinstance(e["parents"], list)
        assert set(e["call_site"]) == {"file", "line", "function"}
        for arg in e["args"].values():
            assert {"digest", "repr"} <= set(arg)
    results = {e["result"] for e in events}
    assert {v for k, v in runs.events_fps.items()} <= results
    maps = [e for e in events if e["operation"] == "map" and e["result"] == runs.events_fps["map"]]
    assert maps and maps[0]["args"]["function"]["digest"] and "tree" in maps[0]["args"]["function"]
    rnd = [e for e in events if e["result"] == runs.events_fps["random"]]
    assert rnd[0]["random_fallback"]["argument"] == "function"


TRACING_API = textwrap.dedent(
    """\
    import json, os, sys
    import cachetool
    cachetool.install_tracing()          # before datasets: must not import it
    assert "datasets" not in sys.modules
    import datasets
    from datasets import load_dataset
    assert cachetool.trace.install.active_tracer() is not None

    def f(ex):
        return {"y": ex["id"] + 1}

    def g(ex):
        return {"z": ex["id"] * 3}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    a = ds.map(f)
    b = ds.map(f)                        # the same step again: a cache hit
    c = ds.map(g, num_proc=2)
    os.remove(c.cache_files[1]["filename"])
    d = ds.map(g, num_proc=2)            # one shard reused, one recomputed: partial
    cachetool.trace.install.uninstall_tracing()
    e = ds.map(lambda ex: {"w": 1})      # untraced
    print(json.dumps([a._fingerprint, c._fingerprint, e._fingerprint]))
    """
)


def test_tracing_api_records_hits_misses_and_partial_num_proc_reuse(tmp_path: Path) -> None:
    """`cachetool.install_tracing()` before `import datasets` hooks in on import; a repeated step
    is a hit, a num_proc step with one surviving shard is partial; nothing after uninstall."""
    script = tmp_path / "api.py"
    script.write_text(TRACING_API, encoding="utf-8")
    (tmp_path / "d.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "d.csv")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    fp_f, fp_g, fp_untraced = json.loads(proc.stdout.strip().splitlines()[-1])
    records = read_ledger(tmp_path / "cache").steps()
    by_result: dict[str | None, list[StepRecord]] = {}
    for r in records:
        by_result.setdefault(r.result, []).append(r)
    assert [r.cache for r in by_result[fp_f]] == ["miss", "hit"]
    assert [r.cache for r in by_result[fp_g]] == ["miss", "partial"]
    assert [f.status for f in by_result[fp_g][1].files] == ["reused", "written"]
    assert fp_untraced not in by_result


COMPUTE = textwrap.dedent(
    """\
    import json, sys, time
    from datasets import load_dataset

    def burn(ex):                        # 10 ms of CPU per row, in whichever process maps it
        t = time.process_time()
        while time.process_time() - t < 0.01:
            pass
        return {"y": ex["id"] + 1}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    a = ds.map(burn, num_proc=2)         # 40 rows: 0.4 s of CPU in two worker processes
    b = ds.map(burn, num_proc=2)         # the same step again: a cache hit
    print(json.dumps(a._fingerprint))
    """
)


def test_a_computed_step_records_its_wall_and_cpu_time_workers_included(tmp_path: Path) -> None:
    """A map that computes records its compute time: wall seconds, and CPU seconds that include
    its `num_proc` worker processes (0.4 s of CPU there, next to almost none in the parent); the
    same step loaded from the cache records none."""
    script = tmp_path / "compute.py"
    script.write_text(COMPUTE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(40)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    proc = cachetool_run(script, str(tmp_path / "d.csv"), env=env, timeout=120, warm=True)
    fp = json.loads(proc.stdout.strip().splitlines()[-1])
    miss, hit = [r for r in read_ledger(tmp_path / "cache").steps() if r.result == fp and not r.internal]
    assert (miss.cache, hit.cache) == ("miss", "hit")
    assert miss.compute is not None and hit.compute is None
    assert miss.compute.wall == pytest.approx(miss.duration)
    assert 0.4 <= miss.compute.cpu < 0.4 + 5 * miss.compute.wall, miss.compute


OLD_DATASETS = textwrap.dedent(
    """\
    import importlib, sys
    for name in sys.argv[1:]:   # as if this datasets had no such method: module.Class.method
        module, cls, attr = name.rsplit(".", 2)
        delattr(getattr(importlib.import_module("datasets." + module), cls), attr)
    import cachetool
    cachetool.install_tracing()
    from datasets import Dataset
    ds = Dataset.from_dict({"x": [1, 2]})
    ds.save_to_disk(sys.argv[0] + ".saved")
    ds = Dataset.load_from_disk(sys.argv[0] + ".saved").map(lambda ex: {"y": 1})
    ds = ds.map(lambda ex: {"z": 2})
    print(ds._fingerprint)
    """
)


def _run_old(tmp_path: Path, *missing: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    script = tmp_path / "old.py"
    script.write_text(OLD_DATASETS, encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(script), *missing], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc, [line for line in proc.stderr.splitlines() if line.startswith("cachetool: warning")]


def test_a_missing_transform_method_is_reported_once_and_the_rest_is_traced(tmp_path: Path) -> None:
    """A `datasets` without some transform methods (2.21 has no `Dataset.repeat`, 2.14 no `skip`,
    `take`, `batch`): one warning names what is not traced, and every other call is recorded."""
    proc, warnings = _run_old(tmp_path, "arrow_dataset.Dataset.repeat", "arrow_dataset.Dataset.skip")
    assert len(warnings) == 1, proc.stderr
    assert "Dataset.repeat" in warnings[0] and "Dataset.skip" in warnings[0] and "not traced" in warnings[0]
    records = read_ledger(tmp_path / "old.py.saved").steps()
    maps = [r for r in records if r.operation == "map"]
    assert len(maps) == 2 and maps[-1].result == proc.stdout.split()[-1]


def test_a_missing_hook_point_warns_once_and_runs_untraced(tmp_path: Path) -> None:
    """A `datasets` without a hook point the tracer cannot do without: one warning, no ledger, and
    the pipeline runs as usual."""
    _, warnings = _run_old(tmp_path, "builder.DatasetBuilder._relative_data_dir")
    assert len(warnings) == 1 and "tracing is off" in warnings[0] and "DatasetBuilder" in warnings[0]
    assert not (tmp_path / "cache" / ".cachetool").exists()
    assert not (tmp_path / "old.py.saved" / ".cachetool").exists()


# ------------------------------------------------------------------------------------------
# `cachetool run` behaves like `python`
# ------------------------------------------------------------------------------------------

PROBE = textwrap.dedent(
    """\
    import os, sys
    import helper
    print("argv", sys.argv)
    print("path0", sys.path[0])
    print("name", __name__, "file", __file__, "spec", __spec__, "cwd", os.getcwd())
    main = sys.modules["__main__"]
    print("main", type(main.__loader__).__name__, main.__dict__ is globals())
    print("stdin", sys.stdin.read().strip())
    if "--datasets" in sys.argv:  # tracing is installed: the run's end is recorded at exit
        import datasets
    if "--raise" in sys.argv:
        helper.fail()
    if "--interrupt" in sys.argv:
        raise KeyboardInterrupt
    sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
    """
)


@pytest.fixture
def probe(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "probe.py").write_text(PROBE, encoding="utf-8")
    (scripts / "helper.py").write_text("def fail():\n    raise ValueError('bad input')\n", encoding="utf-8")
    cwd = tmp_path / "work"
    cwd.mkdir()
    return scripts / "probe.py", cwd, subprocess_env(tmp_path)


@pytest.mark.parametrize(
    "args", [["--help", "-x", "3"], ["--raise"], ["--interrupt"], ["--datasets", "--interrupt"], []]
)
def test_run_behaves_like_python(probe: tuple[Path, Path, dict[str, str]], args: list[str]) -> None:
    """Same argv (options after the script are the script's, `--help` too), sys.path[0], __main__,
    cwd, stdin, stdout, exit code, traceback and KeyboardInterrupt as `python script.py`, also once
    `datasets` is imported (Ctrl-C then ended `cachetool run` with exit status 1, not by SIGINT:
    recording the run's end at exit cleared CPython's note of the interrupt)."""
    script, cwd, env = probe
    rel = os.path.relpath(script, cwd)
    plain = subprocess.run(
        [sys.executable, rel, *args],
        cwd=cwd,
        env=env,
        input="hello",
        capture_output=True,
        text=True,
        timeout=60,
    )
    traced = cachetool_run(rel, *args, env=env, cwd=cwd, input="hello", timeout=60, check=False)
    assert (traced.returncode, traced.stdout, traced.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    if args == ["--raise"]:
        assert plain.stderr.splitlines()[-1] == "ValueError: bad input"
    if "--interrupt" in args:
        assert plain.returncode == -2  # CPython ends by SIGINT after a KeyboardInterrupt


def test_run_a_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    proc = cachetool_run("nope.py", env=subprocess_env(tmp_path), cwd=tmp_path, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "Error: can't open file 'nope.py': No such file or directory"


def test_run_given_an_option_of_the_other_commands_says_it_has_none(tmp_path: Path) -> None:
    """`cachetool run --cache-dir DIR p.py`, as every other command takes it: a usage error saying
    `run` has no such option and how to choose the pipeline's cache (exit 2). It said "can't open
    file '--cache-dir'", as if the option were the script."""
    (tmp_path / "p.py").write_text("print('ran')\n", encoding="utf-8")
    env = subprocess_env(tmp_path)
    proc = cachetool_run("--cache-dir", "/data/hf", "p.py", env=env, cwd=tmp_path, timeout=60, check=False)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr == (
        "Error: no such option: --cache-dir; datasets chooses where the pipeline caches: "
        "`HF_DATASETS_CACHE=DIR cachetool run SCRIPT`, or cache_dir= in the script\n"
    ), proc.stderr


def test_run_a_folder_without_main_is_a_one_line_error(tmp_path: Path) -> None:
    """`cachetool run data` where `data` is a folder without `__main__.py`: one `Error:` line
    (what `python data` says, without a traceback) and exit 2, as for a missing script."""
    (tmp_path / "data").mkdir()
    proc = cachetool_run("data", env=subprocess_env(tmp_path), cwd=tmp_path, timeout=60, check=False)
    assert (proc.returncode, proc.stderr) == (2, "Error: can't find '__main__' module in 'data'\n")


MODULE_PROBE = textwrap.dedent(
    """\
    import sys
    print("argv", sys.argv[1:], "name", __name__, "spec", __spec__.name, "path0", sys.path[0])
    from datasets import Dataset
    print("rows", len(Dataset.from_dict({"x": [1, 2]}).map(lambda ex: {"y": ex["x"]})))
    sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
    """
)


def test_run_m_runs_a_module_as_python_m_does(tmp_path: Path) -> None:
    """`cachetool run -m pkg.probe ARGS` runs the module as `python -m pkg.probe ARGS` does (same
    argv, `__name__`, `__spec__`, `sys.path[0]`, output and exit code; options after the module
    are its own) and records its steps in the ledger; a module that does not exist gives
    python's one line and exit code."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg" / "probe.py").write_text(MODULE_PROBE, encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    for args in (["pkg.probe", "--help", "3"], ["no_such_module"]):
        plain = subprocess.run(
            [sys.executable, "-m", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        traced = cachetool_run("-m", *args, env=env, cwd=tmp_path, timeout=120, check=False, warm=True)
        assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout), traced.stderr[-2000:]
        assert traced.stderr.splitlines()[-1:] == plain.stderr.splitlines()[-1:]
    assert plain.returncode == 1 and "No module named no_such_module" in plain.stderr
    records = [line for p in (tmp_path / "cache").glob(".cachetool/ledger/*.jsonl") for line in p.open()]
    assert any('"operation":"map"' in line for line in records)


CLI_FRONT = ("typer", "rich", "click", "pydantic")


@pytest.mark.parametrize("how", ["-m", "console script"])
def test_run_starts_the_script_without_the_cli_front(tmp_path: Path, how: str) -> None:
    """`cachetool run script.py` (and `python -m cachetool run`) hands the script over before
    Typer, Click, Rich or pydantic are imported: start-up costs what `python script.py` does.
    The script's own process never holds them either way (it is a fresh interpreter), so the
    interpreter's own import log (`-X importtime`, which the script's interpreter inherits) is
    read for the whole command, the front included."""
    (tmp_path / "s.py").write_text("import sys\nprint('ran', sys.argv[1:])\n", encoding="utf-8")
    if how == "-m":
        front = ["-m", "cachetool"]
    else:  # what the installed `cachetool` script does: pyproject's entry point, called
        import tomllib

        project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text("utf-8"))
        module, func = project["project"]["scripts"]["cachetool"].split(":")
        front = ["-c", f"import sys; sys.argv[0] = 'cachetool'; from {module} import {func}; {func}()"]
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *front, "run", "s.py", "--help"],
        cwd=tmp_path,
        env=subprocess_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (0, "ran ['--help']\n"), proc.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "cachetool" in imported  # the log is there at all
    assert imported.isdisjoint(CLI_FRONT), sorted(imported & set(CLI_FRONT))
