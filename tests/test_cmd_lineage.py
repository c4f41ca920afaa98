"""`cachetool lineage` on a cache filled by a real traced pipeline (see lineage_pipeline.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests import forks

try:  # tests/ may or may not be a package
    from tests.lineage_pipeline import PipelineRuns, pipeline_runs
except ImportError:
    from lineage_pipeline import PipelineRuns, pipeline_runs  # type: ignore[no-redef]
from typer.testing import CliRunner

from cachetool.cache.scan import scan_cache
from cachetool.cli.app import app
from cachetool.history.graph import NOT_RECORDED
from tests.conftest import cachetool_run, hf_env, invoke, shared_session_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> PipelineRuns:
    return pipeline_runs(shared_session_dir(tmp_path_factory) / "lineage")


@pytest.fixture
def cli(runs: PipelineRuns, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("CACHETOOL_HOME", runs.env["CACHETOOL_HOME"])
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    return CliRunner()


def _lineage(cli: CliRunner, *args: str) -> tuple[int, str, str]:
    result = cli.invoke(app, ["lineage", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


CHAIN = [
    "csv",
    "map",
    "batched",
    "num_proc",
    "filter",
    "shuffle",
    "sort",
    "train",
    "remove_columns",
    "loaded",
    "loaded_map",
]


def test_chain_one_step_a_line_from_the_source_across_the_saved_folder(
    runs: PipelineRuns, cli: CliRunner
) -> None:
    """The chain of the map made after load_from_disk starts at the csv load in the cache root,
    passes through the saved folder, and says per step what it was and what is on disk now."""
    fp = runs.fps
    code, out, err = _lineage(cli, fp["loaded_map"][:8], "--cache-dir", str(runs.saved))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Lineage of {fp['loaded_map']}"
    steps = lines[1:]
    assert len(steps) == len(CHAIN)
    for number, (line, name) in enumerate(zip(steps, CHAIN, strict=True), 1):
        assert line.lstrip().startswith(f"{number}. ")
        assert f"->  {fp[name]}  " in line
    assert "load_dataset csv [train]" in steps[0] and "(1 miss)" in steps[0]
    assert "map  add_len @ pipeline.py:" in steps[1]
    assert "batch_size=8, batched=True" in steps[2]
    assert "no file" in steps[8] and "saved to " + str(runs.saved) in steps[8]
    assert "load_from_disk saved" in steps[9]
    assert "map  score @ pipeline.py:" in steps[10]
    assert NOT_RECORDED not in out


def test_json_chain(runs: PipelineRuns, cli: CliRunner) -> None:
    fp = runs.fps
    code, out, _ = _lineage(cli, fp["loaded_map"], "--cache-dir", str(runs.cache), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["mode"] == "chain" and doc["recorded"] is True
    assert [s["fingerprint"] for s in doc["steps"]] == [fp[k] for k in CHAIN]
    assert doc["steps"][3]["cache"] == "miss" and len(doc["steps"][3]["files"]) == 2
    assert all(f["exists"] for f in doc["steps"][3]["files"])
    assert [fp["remove_columns"], fp["loaded"]] in doc["edges"]
    assert doc["entry"] is None  # its file lives in the saved folder, a root of its own
    doc = json.loads(_lineage(cli, fp["loaded_map"], "--cache-dir", str(runs.saved), "--json")[1])
    assert doc["entry"]["kind"] == "derived" and doc["entry"]["fingerprint"] == fp["loaded_map"]
    assert [s["fingerprint"] for s in doc["steps"]] == [fp[k] for k in CHAIN]


def test_descendants_and_the_whole_forest(runs: PipelineRuns, cli: CliRunner) -> None:
    """--descendants shows the tree below a fingerprint (both branches of the csv source);
    --all shows every branch of the dataset from any member of it."""
    fp = runs.fps
    code, out, _ = _lineage(cli, fp["csv"], "--cache-dir", str(runs.cache), "--descendants", "--json")
    assert code == 0
    doc = json.loads(out)
    depth = {s["fingerprint"]: s["depth"] for s in doc["steps"]}
    assert depth[fp["csv"]] == 0
    assert {depth[fp[k]] for k in ("map", "branch1", "branch2", "random")} == {1}
    assert depth[fp["batched"]] == 2 and depth[fp["loaded_map"]] == 10
    assert fp["json"] not in depth and fp["mem_map"] not in depth
    code, out, _ = _lineage(cli, fp["test"], "--cache-dir", str(runs.cache), "--all", "--json")
    forest = {s["fingerprint"] for s in json.loads(out)["steps"]}
    assert forest == set(depth)
    code, human, _ = _lineage(cli, fp["csv"], "--cache-dir", str(runs.cache), "--descendants")
    assert human.splitlines()[0] == f"Descendants of {fp['csv']}"
    assert any(line.startswith("    └ map  add_len") for line in human.splitlines())


def test_dot_and_mermaid_draw_the_graph(runs: PipelineRuns, cli: CliRunner) -> None:
    fp = runs.fps
    code, dot, _ = _lineage(cli, fp["concat"], "--cache-dir", str(runs.cache), "--format", "dot")
    assert code == 0
    assert dot.startswith("digraph lineage {") and dot.rstrip().endswith("}")
    assert f'"{fp["train"]}" -> "{fp["concat"]}";' in dot
    assert f'"{fp["test"]}" -> "{fp["concat"]}";' in dot
    code, mermaid, _ = _lineage(cli, fp["concat"], "--cache-dir", str(runs.cache), "--format", "mermaid")
    assert mermaid.startswith("flowchart TD\n")
    # 7 edges from the csv load to train, sort -> test, and the two into the concatenation.
    assert mermaid.count(" --> ") == 7 + 1 + 2
    # Mermaid labels are HTML: `<lambda>` is escaped, or the function name vanishes as a tag.
    code, mermaid, _ = _lineage(cli, fp["branch1"], "--cache-dir", str(runs.cache), "--format", "mermaid")
    assert "#lt;lambda#gt; @ " in mermaid and "<lambda>" not in mermaid, mermaid


def test_an_entry_without_a_record_says_so_and_shows_the_disk(
    runs: PipelineRuns, cli: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The plain run's cache has no ledger: lineage is honest about it and still shows what the
    disk says about the entry."""
    monkeypatch.setenv("CACHETOOL_HOME", str(tmp_path / "empty_home"))
    fp = runs.plain_fps
    code, out, err = _lineage(cli, fp["map"], "--cache-dir", str(runs.plain / "cache"))
    assert code == 0
    assert f"{fp['map']}  {NOT_RECORDED}" in out
    assert "On disk: kind derived, dataset csv/" in out
    assert "cachetool run" in err  # the hint
    doc = json.loads(_lineage(cli, fp["map"], "--cache-dir", str(runs.plain / "cache"), "--json")[1])
    assert doc["recorded"] is False and doc["entry"]["kind"] == "derived"


def test_unknown_and_ambiguous_fingerprints_are_usage_errors(runs: PipelineRuns, cli: CliRunner) -> None:
    code, out, err = _lineage(cli, "zzzz", "--cache-dir", str(runs.cache))
    assert code == 2 and out == ""
    assert err.strip() == f"Error: no cache entry matches 'zzzz' in {runs.cache}"
    # A first character two distinct entries of the cache share (the fingerprints the run
    # reported can name one entry twice: an alias, a step that changed nothing).
    firsts: dict[str, set[str]] = {}
    for e in scan_cache(runs.cache).entries:
        if e.fingerprint:
            firsts.setdefault(e.fingerprint[0], set()).add(e.id)
    shared = next(c for c, ids in firsts.items() if len(ids) > 1)
    code, _, err = _lineage(cli, shared, "--cache-dir", str(runs.cache))
    assert code == 2 and err.startswith(f"Error: '{shared}' is ambiguous")


def test_scan_attaches_recorded_parent_and_operation(runs: PipelineRuns, cli: CliRunner) -> None:
    """What `ls` and `show` read: recorded parent and operation on the entries of the cache."""
    from cachetool.history.ledger import read_ledger

    report = scan_cache(runs.cache, usage=read_ledger(runs.cache).usage())
    by_fp = {e.fingerprint: e for e in report.entries if e.fingerprint}
    fp = runs.fps
    assert (by_fp[fp["map"]].parent, by_fp[fp["map"]].operation) == (fp["csv"], "map")
    assert (by_fp[fp["filter"]].parent, by_fp[fp["filter"]].operation) == (fp["num_proc"], "filter")
    assert by_fp[fp["csv"]].operation == "load_dataset" and by_fp[fp["csv"]].parent is None
    assert by_fp[fp["csv"]].last_used is not None


def test_help_has_examples() -> None:
    runner = CliRunner()
    for command in ("run", "lineage"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0
        assert "Examples" in result.stdout


@pytest.mark.slow
def test_lineage_shows_a_step_gc_removed_as_deleted(tmp_path: Path) -> None:
    from cachetool.demo_cache import write_demo_files

    env = hf_env(tmp_path)
    script = write_demo_files(tmp_path / "demo")
    run = cachetool_run(script, env=env, warm=True)
    final = run.stdout.strip().splitlines()[-1]
    cache = env["HF_DATASETS_CACHE"]
    chain = json.loads(invoke("lineage", final, "--cache-dir", cache, "--json", env=env).stdout)["steps"]
    victim = next(s["fingerprint"] for s in chain if s["operation"] == "filter")
    gc = forks.run(
        [sys.executable, "-m", "cachetool", "gc", victim, "--cache-dir", cache, "--min-age", "0", "-y"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gc.returncode == 0, gc.stderr
    after = json.loads(invoke("lineage", final, "--cache-dir", cache, "--json", env=env).stdout)["steps"]
    step = next(s for s in after if s["fingerprint"] == victim)
    assert step["deleted"].startswith("deleted by gc ") and all(not f["exists"] for f in step["files"])
    human = invoke("lineage", final, "--cache-dir", cache, env=env, columns=200).stdout
    line = next(x for x in human.splitlines() if victim in x)
    assert "deleted" in line


def test_lineage_after_the_cache_folder_was_moved_finds_the_files_at_the_new_place(tmp_path: Path) -> None:
    """A pipeline runs under `cachetool run`, then the whole cache folder is moved (`mv`): lineage
    with `--cache-dir` at the new place shows every step's files there with their sizes, not
    "gone" (a recorded path under the root it was recorded in is looked up under the root's
    current location)."""
    import shutil

    from cachetool.demo_cache import write_demo_files

    env = hf_env(tmp_path)
    script = write_demo_files(tmp_path / "demo")
    run = cachetool_run(script, env=env, warm=True)
    final = run.stdout.strip().splitlines()[-1]
    old = Path(env["HF_DATASETS_CACHE"])
    new = tmp_path / "moved" / "cache"
    new.parent.mkdir()
    shutil.move(old, new)
    doc = json.loads(invoke("lineage", final, "--cache-dir", str(new), "--json", env=env).stdout)
    with_files = [s for s in doc["steps"] if s["files"]]
    assert len(with_files) >= 3
    for step in with_files:
        assert [(f["path"].startswith(f"{new}/"), f["exists"]) for f in step["files"]] == [
            (True, True)
        ] * len(step["files"]), step
    human = invoke("lineage", final, "--cache-dir", str(new), env=env, columns=200).stdout
    assert "gone" not in human, human


def test_a_damaged_ledger_of_an_unrelated_root_is_not_warned_about(tmp_path: Path) -> None:
    """Two caches traced by one user; the ledger of the second has an unreadable line. In the
    first, whose pipeline has a `num_proc` map (its shards' records name parents no step of
    this cache made), `explain --last`, `lineage` and `report` say nothing of the second cache:
    they warned "skipped an unreadable record" of a file in it, which nothing they showed came
    from."""
    script = (
        "import sys\nfrom datasets import load_dataset\n"
        "ds = load_dataset('csv', data_files='d.csv', split='train')\n"
        "ds = ds.map(lambda ex: {'y': ex['x'] + int(sys.argv[1])}, num_proc=2)\n"
    )
    (tmp_path / "p.py").write_text(script, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    env = hf_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "other"))
    cachetool_run("p.py", "0", env=env, cwd=tmp_path, warm=True)
    [segment] = (tmp_path / "other" / ".cachetool" / "ledger").glob("*.jsonl")
    with open(segment, "ab") as f:
        f.write(b'{"unreadable\n')
    env["HF_DATASETS_CACHE"] = str(tmp_path / "cache")
    cachetool_run("p.py", "1", env=env, cwd=tmp_path, warm=True)

    [fp] = [
        e["fingerprint"]
        for e in json.loads(invoke("ls", "--json", env=env).stdout)["entries"]
        if e["kind"] == "shards"
    ]
    for args in (["explain", "--last"], ["lineage", fp], ["report", "-o", str(tmp_path / "r.html")]):
        said = invoke(*args, env=env)
        assert said.exit_code == 0, said.stdout + said.stderr
        assert "other" not in said.stderr and "unreadable" not in said.stderr, (args, said.stderr)


def test_lineage_from_a_saved_folder_counts_the_runs_of_the_cache_its_steps_ran_in(tmp_path: Path) -> None:
    """A pipeline loads a CSV, maps it and saves it to a folder; another cache loads the same CSV
    (the same source fingerprint) in two traced runs of its own. `lineage` of the saved state,
    asked in the saved folder, shows the load with the runs of the cache the pipeline ran in
    (1 miss, as asked there) and says it was recorded there, not the hits and misses of every
    cache that ever loaded that CSV added together."""
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    (tmp_path / "load.py").write_text(
        "from datasets import load_dataset\nload_dataset('csv', data_files='d.csv', split='train')\n",
        encoding="utf-8",
    )
    (tmp_path / "p.py").write_text(
        "from datasets import load_dataset\n"
        "ds = load_dataset('csv', data_files='d.csv', split='train')\n"
        "ds.map(lambda ex: {'y': ex['x'] + 1}).save_to_disk('saved')\n",
        encoding="utf-8",
    )
    env = hf_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "other"))
    for _ in range(2):
        cachetool_run("load.py", env=env, cwd=tmp_path, warm=True)
    env["HF_DATASETS_CACHE"] = str(tmp_path / "cache")
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)

    saved = json.loads((tmp_path / "saved" / "state.json").read_text())["_fingerprint"]
    here = json.loads(invoke("lineage", saved, "--json", env=env).stdout)["steps"][0]
    there = json.loads(
        invoke("lineage", saved, "--json", "--cache-dir", str(tmp_path / "saved"), env=env).stdout
    )
    load = there["steps"][0]
    assert load["operation"] == "load_dataset" == here["operation"], load
    assert (
        (load["runs"], load["misses"], load["hits"])
        == (here["runs"], here["misses"], here["hits"])
        == (1, 1, 0)
    )
    assert load["root"] == str(tmp_path / "cache"), load


def test_a_map_written_to_a_folder_of_its_own_after_load_from_disk_has_its_whole_chain(
    tmp_path: Path,
) -> None:
    """A pipeline loads a CSV, maps it and saves it; a second traced script loads the saved
    folder and maps it with `cache_file_name=` in a third folder. `lineage` of that map, asked in
    the third folder, goes back through the saved folder to the CSV load (no "parent not
    recorded — run the pipeline with `cachetool run`": it was); `lineage`, `show` and `explain`
    asked in the default cache name the folder that records it and the command that shows it, and
    that command works."""
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    (tmp_path / "p.py").write_text(
        "from datasets import load_dataset\n"
        "ds = load_dataset('csv', data_files='d.csv', split='train')\n"
        "ds.map(lambda ex: {'y': ex['x'] + 1}).save_to_disk('saved')\n",
        encoding="utf-8",
    )
    (tmp_path / "u.py").write_text(
        "import os\nfrom datasets import load_from_disk\nos.makedirs('out', exist_ok=True)\n"
        "ds = load_from_disk('saved').map(lambda ex: {'z': ex['y'] * 2}, cache_file_name='out/z.arrow')\n"
        "print(ds._fingerprint)\n",
        encoding="utf-8",
    )
    env = hf_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    fp = cachetool_run("u.py", env=env, cwd=tmp_path, warm=True).stdout.split()[-1]

    there = invoke("lineage", fp, "--cache-dir", str(tmp_path / "out"), env=env)
    assert there.exit_code == 0 and NOT_RECORDED not in there.stdout, there.stdout
    doc = json.loads(invoke("lineage", fp, "--json", "--cache-dir", str(tmp_path / "out"), env=env).stdout)
    ops = [s["operation"] for s in doc["steps"]]
    assert ops[0] == "load_dataset" and ops[-2:] == ["load_from_disk", "map"], ops

    for name in ("lineage", "show", "explain"):
        here = invoke(name, fp, env=env)
        assert here.exit_code == 2 and "Traceback" not in here.stderr, here.stderr
        command = here.stderr[here.stderr.index("`cachetool ") + 1 : here.stderr.rindex("`")].split()
        assert command == ["cachetool", name, fp, "--cache-dir", str(tmp_path / "out")], here.stderr
        followed = invoke(*command[1:], env=env)
        assert followed.exit_code == 0, followed.stderr
        assert name != "show" or "in (cache root)" in followed.stdout, followed.stdout  # not "in ."
    assert invoke("lineage", fp, "--cache-dir", str(tmp_path / "out"), env=env).stdout == there.stdout


def test_a_run_with_caching_disabled_does_not_make_the_cached_files_gone(tmp_path: Path) -> None:
    """A pipeline runs cached, then again after `datasets.disable_caching()` (the same
    fingerprints, its files in a temp folder deleted at exit): `lineage` of the last step shows
    the cache files still there with their sizes, `explain` says the step ran with caching
    disabled, `verify` reports no recorded file gone, and `stats` counts its steps under
    "(caching disabled)". They said "gone", "its cache file was gone" and "recorded file no
    longer exists" of the files `ls` lists, and `stats` named a saved dataset that is not there."""
    (tmp_path / "p.py").write_text(
        "import sys, datasets\nif sys.argv[1:]:\n    datasets.disable_caching()\n"
        "ds = datasets.load_dataset('csv', data_files='d.csv', split='train')\n"
        "print(ds.map(lambda ex: {'y': ex['x'] + 1})._fingerprint)\n",
        encoding="utf-8",
    )
    (tmp_path / "d.csv").write_text("x\n1\n2\n", encoding="utf-8")
    env = hf_env(tmp_path)
    final = cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout.split()[-1]
    assert cachetool_run("p.py", "off", env=env, cwd=tmp_path, warm=True).stdout.split()[-1] == final
    step = json.loads(invoke("lineage", final, "--json", env=env).stdout)["steps"][-1]
    assert step["fingerprint"] == final and step["files"], step
    assert all(f["exists"] and f["path"].startswith(env["HF_DATASETS_CACHE"]) for f in step["files"]), step
    assert "gone" not in invoke("lineage", final, env=env, columns=80).stdout
    # explain says why the step computed although its file is there; verify does not report the
    # temp files datasets deleted at exit (it said "recorded file no longer exists").
    said = " ".join(invoke("explain", final, env=env, columns=80).stdout.split())
    assert "its cache file was gone" not in said, said
    assert "it ran without a persistent cache: datasets.disable_caching()" in said, said
    verified = json.loads(invoke("verify", "--json", env=env).stdout)["findings"]
    assert not [f for f in verified if f["code"] == "record-file-gone"], verified
    datasets = [d["key"] for d in json.loads(invoke("stats", "--json", env=env).stdout)["datasets"]]
    assert "(caching disabled)" in datasets and not [d for d in datasets if d.startswith("saved:")], datasets
