"""`cachetool explain` on two real runs of one pipeline, with one change of each kind in between
(tests/explain_pipeline.py): each recomputed step names what changed, and reused results of
edited helper functions are reported as stale."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

try:  # tests/ may or may not be a package
    from tests.explain_pipeline import HELPERS_V1, SCRIPT, ExplainRuns, shared_explain_runs
except ImportError:
    from explain_pipeline import (  # type: ignore[no-redef]
        HELPERS_V1,
        SCRIPT,
        ExplainRuns,
        shared_explain_runs,
    )

from cachetool.cli.app import app
from cachetool.history.explain.answer import ExplainReport, LineChange, StepExplanation
from cachetool.history.explain.explainer import explain_fingerprint, explain_run
from cachetool.history.explain.stale import definition, diff_lines, stale_hits
from cachetool.history.ledger import read_ledger

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ExplainRuns:
    return shared_explain_runs(tmp_path_factory)


@pytest.fixture
def report(runs: ExplainRuns, monkeypatch: pytest.MonkeyPatch) -> ExplainReport:
    monkeypatch.setenv("CACHETOOL_HOME", runs.env["CACHETOOL_HOME"])
    return explain_run(runs.cache)


def step(report: ExplainReport, fingerprint: str) -> StepExplanation:
    found = [s for s in report.steps if s.step.fingerprint == fingerprint]
    assert len(found) == 1, [s.step.fingerprint for s in report.steps]
    return found[0]


def test_the_runs_changed_what_the_scenario_says(runs: ExplainRuns) -> None:
    """Sanity of the scenario: the steps meant to hit kept their fingerprints (the stale ones
    too: datasets hashes the edited helpers by name), all others got new ones."""
    same = {k for k in runs.first if runs.first[k] == runs.second[k]}
    assert same == {"base", "stale", "stale_dep", "big"}


def test_last_explains_every_computed_step_of_the_latest_run(
    report: ExplainReport, runs: ExplainRuns
) -> None:
    """`explain --last`: exactly the steps the second run computed, in call order; the hits are
    counted as loaded."""
    changed = ["threshold", "cascade", "shout", "tag", "random", "wbs", "global", "data2_source", "data2"]
    assert [s.step.fingerprint for s in report.steps] == [runs.second[k] for k in changed]
    assert all(s.status == "computed" for s in report.steps)
    assert report.computed == len(changed) == report.to_json()["computed"]
    assert report.loaded == 5  # the csv source, base, stale, stale_dep, big


def test_an_argument_change_names_the_key_and_both_values(report: ExplainReport, runs: ExplainRuns) -> None:
    s = step(report, runs.second["threshold"])
    [reason] = s.reasons
    assert (reason.kind, reason.path, reason.before, reason.after) == (
        "argument",
        "fn_kwargs['threshold']",
        "0.5",
        "0.6",
    )
    assert reason.text == "`fn_kwargs['threshold']` changed 0.5 → 0.6"
    assert s.compared_with is not None and s.compared_with.fingerprint == runs.first["threshold"]


def test_a_step_downstream_of_a_change_names_where_it_happened(
    report: ExplainReport, runs: ExplainRuns
) -> None:
    [reason] = step(report, runs.second["cascade"]).reasons
    assert reason.kind == "argument" and reason.path == "fn_kwargs['threshold']"
    assert reason.upstream is not None and reason.upstream.fingerprint == runs.second["threshold"]
    assert reason.text.startswith(
        f"its input changed: filter keep @ pipeline.py:{runs.line('base.filter(keep')} was recomputed because"
    )


def test_a_downstream_step_points_to_the_step_where_its_input_changed(runs: ExplainRuns) -> None:
    """In `explain --last`, steps are numbered and a step downstream of a recomputed step of the
    same run says "its input changed: see step N" in one line, instead of repeating that step's
    cause in full; the JSON keeps the whole reason."""
    env = {"CACHETOOL_HOME": runs.env["CACHETOOL_HOME"]}
    human = CliRunner().invoke(
        app, ["explain", "--last", "--cache-dir", str(runs.cache)], env={**env, "COLUMNS": "80"}
    )
    lines = human.stdout.splitlines()
    numbered = {
        m.group(2): int(m.group(1)) for m in (re.match(r"(\d+)\. .*->  (\w+)  \(", x) for x in lines) if m
    }
    threshold, cascade = numbered[runs.second["threshold"]], numbered[runs.second["cascade"]]
    at = next(i for i, x in enumerate(lines) if x.startswith(f"{cascade}. "))
    assert lines[at + 1].strip() == f"its input changed: see step {threshold}", lines[at : at + 3]
    assert lines[at + 2].startswith(f"{cascade + 1}. ") or not lines[at + 2].startswith("    "), lines
    assert human.stdout.count("changed 0.5 → 0.6") == 1, human.stdout


def test_an_edited_function_shows_the_changed_line(report: ExplainReport, runs: ExplainRuns) -> None:
    [reason] = step(report, runs.second["shout"]).reasons
    assert reason.kind == "function-source"
    line = runs.line('ex["text"].upper()')
    assert reason.lines == (
        LineChange(line, 'return {"up": ex["text"].upper()}', 'return {"up": ex["text"].casefold()}'),
    )
    assert f"line {line}: `return" in reason.text


def test_a_set_literal_is_reported_as_nondeterministic_not_as_a_change(
    report: ExplainReport, runs: ExplainRuns
) -> None:
    """`x in {"alpha", ...}` compiles to a frozenset constant that pickles in hash-seed order: the
    code did not change, the pickle did. Point to check-determinism."""
    [reason] = step(report, runs.second["tag"]).reasons
    assert reason.kind == "nondeterministic"
    assert reason.path is not None and re.fullmatch(r"function → code → const\[\d+\]", reason.path)
    assert "(frozenset of 5 str)" in reason.text and "cachetool check-determinism" in reason.text
    assert "depends on PYTHONHASHSEED" in reason.text, reason.text  # check-determinism's words
    assert reason.hint is not None and "PYTHONHASHSEED" in reason.hint


def test_a_random_fingerprint_names_the_unhashable_part(report: ExplainReport, runs: ExplainRuns) -> None:
    [reason] = step(report, runs.second["random"]).reasons
    assert (reason.kind, reason.argument, reason.path) == ("random", "fn_kwargs", "fn_kwargs['model']")
    assert "cannot pickle 'generator' object" in reason.text


def test_only_a_non_semantic_argument_changed(report: ExplainReport, runs: ExplainRuns) -> None:
    """writer_batch_size=1000 is the default (datasets leaves it out of the hash), 500 is not."""
    [reason] = step(report, runs.second["wbs"]).reasons
    assert (reason.kind, reason.argument, reason.before, reason.after) == (
        "non-semantic",
        "writer_batch_size",
        "(default)",
        "500",
    )
    assert reason.text.startswith("only writer_batch_size (default) → 500 changed")


def test_a_changed_global_of_the_function_is_named(report: ExplainReport, runs: ExplainRuns) -> None:
    """`short` reads the module-level LIMIT, which datasets pickles with the function."""
    [reason] = step(report, runs.second["global"]).reasons
    assert (reason.kind, reason.argument, reason.path, reason.before, reason.after) == (
        "argument",
        "function",
        "function → global 'LIMIT'",
        "5",
        "6",
    )


def test_a_modified_input_file_is_named(report: ExplainReport, runs: ExplainRuns) -> None:
    [source] = step(report, runs.second["data2_source"]).reasons
    assert source.kind == "source" and source.upstream is None
    assert source.text == "the source dataset changed: data2.csv modified (size 498 → 514 bytes)"
    [downstream] = step(report, runs.second["data2"]).reasons
    assert downstream.kind == "source"
    assert downstream.upstream is not None and downstream.upstream.fingerprint == runs.second["data2_source"]


def test_edited_helpers_make_stale_hits_with_the_changed_line(
    report: ExplainReport, runs: ExplainRuns
) -> None:
    """`clean_row` (mapped directly) and `clean_text` (called by a function of the script) come
    from text_helpers.py, which datasets hashes by name: both steps were hits in run 2 although
    the helpers changed. Each stale hit names the helper and the line."""
    stale = {s.fingerprint: s for s in report.stale}
    assert set(stale) == {runs.second["stale"], runs.second["stale_dep"]}
    dep = stale[runs.second["stale_dep"]]
    assert [c.qualname for c in dep.changes] == ["text_helpers.clean_text"]
    assert dep.changes[0].lines == (
        LineChange(2, "return text.strip().lower()", "return text.strip().casefold()"),
    )
    assert re.fullmatch(
        rf"cache entry cache-{dep.fingerprint}\.arrow was reused at \d\d:\d\d, but `clean_text` in "
        r"text_helpers\.py changed since it was computed \(line 2: `return text\.strip\(\)\.lower\(\)` → "
        r"`return text\.strip\(\)\.casefold\(\)`\)",
        dep.message,
    )
    direct = stale[runs.second["stale"]]
    assert [c.qualname for c in direct.changes] == ["text_helpers.clean_row", "text_helpers.clean_text"]
    assert direct.changes[0].lines[0].line == 6


def test_stale_hits_of_the_root_read_the_sources_on_disk(
    runs: ExplainRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stale_hits(root)` (behind `verify --stale`): the entries whose computing code differs from
    the source files now, with the run that reused them."""
    monkeypatch.setenv("CACHETOOL_HOME", runs.env["CACHETOOL_HOME"])
    found = {s.fingerprint: s for s in stale_hits(runs.cache)}
    assert set(found) == {runs.second["stale"], runs.second["stale_dep"]}
    assert all(s.reused_run is not None and s.files and Path(s.files[0]).exists() for s in found.values())


def test_verify_stale_reports_them_as_errors(runs: ExplainRuns) -> None:
    """`cachetool verify --stale`: one error per stale entry, exit 1; without --stale they are
    not looked for."""
    env = {"CACHETOOL_HOME": runs.env["CACHETOOL_HOME"], "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["verify", "--stale", "--json", "--cache-dir", str(runs.cache)], env=env)
    assert result.exit_code == 1, result.output
    stale = [f for f in json.loads(result.stdout)["findings"] if f["kind"] == "stale"]
    assert sorted(f["entry"] for f in stale) == sorted([runs.second["stale"], runs.second["stale_dep"]])
    assert all(f["severity"] == "error" and "changed since it was computed" in f["problem"] for f in stale)
    plain = CliRunner().invoke(app, ["verify", "--json", "--cache-dir", str(runs.cache)], env=env)
    assert not [f for f in json.loads(plain.stdout)["findings"] if f["kind"] == "stale"]


def test_explain_one_fingerprint_with_its_history(runs: ExplainRuns, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHETOOL_HOME", runs.env["CACHETOOL_HOME"])
    rep = explain_fingerprint(runs.cache, runs.second["shout"][:8])
    [s] = rep.steps
    assert s.step.fingerprint == runs.second["shout"] and s.reasons[0].kind == "function-source"
    first = explain_fingerprint(runs.cache, f"cache-{runs.first['base']}.arrow")
    assert first.steps[0].reasons[0].kind == "first-run"
    first_text = "first run recorded in this cache: it held nothing yet, so every step ran"
    assert first.steps[0].reasons[0].text == first_text


def test_cli_json_and_exit_code(runs: ExplainRuns) -> None:
    """`explain --last --json`: the documented document; exit 1 because of the stale hits."""
    env = {"CACHETOOL_HOME": runs.env["CACHETOOL_HOME"], "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["explain", "--last", "--json", "--cache-dir", str(runs.cache)], env=env)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {
        "version",
        "root",
        "mode",
        "run",
        "run_time",
        "computed",
        "loaded",
        "steps",
        "stale",
        "uncached",
        "uncached_seconds",
        "uncached_hint",
        "interrupted",
        "failed",
    }
    assert doc["mode"] == "run" and doc["computed"] == 9 and doc["loaded"] == 5
    assert doc["interrupted"] is None  # the run ended: not killed
    kinds = {s["fingerprint"]: s["reasons"][0]["kind"] for s in doc["steps"]}
    assert kinds[runs.second["tag"]] == "nondeterministic"
    human = CliRunner().invoke(
        app, ["explain", runs.second["threshold"], "--cache-dir", str(runs.cache)], env=env
    )
    assert human.exit_code == 0, human.output
    assert "`fn_kwargs['threshold']` changed 0.5 → 0.6" in human.stdout
    by_script = CliRunner().invoke(
        app, ["explain", "--script", str(runs.script), "--json", "--cache-dir", str(runs.cache)], env=env
    )
    assert json.loads(by_script.stdout)["run"] == doc["run"]
    missing = CliRunner().invoke(app, ["explain", "--cache-dir", str(runs.cache)], env=env)
    assert missing.exit_code == 2
    assert missing.stderr.strip() == "Error: give a fingerprint, --last or --script SCRIPT"


def test_records_stay_small_with_a_10_mb_closure(runs: ExplainRuns) -> None:
    """The step whose function closes over a 10 MB array records a bounded summary: a digest and a
    type for the array. Bytes per record are printed for the record (run with -s)."""
    segments = sorted((runs.cache / ".cachetool" / "ledger").glob("*.jsonl"))
    first_run = segments[0].read_text(encoding="utf-8").splitlines()
    sizes = {}
    for line in first_run:
        rec = json.loads(line)
        if rec["type"] in ("transform", "root") and not rec["internal"]:
            sizes[rec["result"]] = len(line.encode())
    big = sizes[runs.first["big"]]
    mean = sum(sizes.values()) / len(sizes)
    total = sum(len(line.encode()) + 1 for line in first_run)
    print(
        f"\nledger bytes per step record: mean {mean:.0f}, max {max(sizes.values())}, 10 MB closure {big}; "
        f"run 1 segment {total} bytes for {len(first_run)} lines"
    )
    assert big < 4000 and max(sizes.values()) < 4000
    assert total < 100_000
    big_rec = next(
        r for r in read_ledger(runs.cache).steps() if r.result == runs.first["big"] and r.cache == "miss"
    )
    summary = big_rec.args["function"].summary
    assert summary is not None
    closure = summary["c"]
    assert any(c["l"] == "closure 'table'" and c["t"] == "numpy.ndarray" and c["d"] for c in closure)


def test_function_source_and_line_diff_ignore_comments_but_not_code() -> None:
    """The disk check behind `verify --stale`: a comment or blank line is not a change."""
    from cachetool.history.explain.stale import tokens as _tokens

    edited = HELPERS_V1.replace(
        "    return text.strip().lower()", "    # tidy\n    return text.strip().lower()\n"
    )
    a, b = definition(HELPERS_V1, "clean_text"), definition(edited, "clean_text")
    assert a == ("def clean_text(text):\n    return text.strip().lower()\n", 1)
    assert b is not None and _tokens(a[0]) == _tokens(b[0])
    changed = HELPERS_V1.replace(".lower()", ".upper()")
    c = definition(changed, "clean_text")
    assert c is not None and _tokens(a[0]) != _tokens(c[0])
    assert diff_lines(a[0], c[0], 1, 1) == [
        LineChange(2, "return text.strip().lower()", "return text.strip().upper()")
    ]
    assert definition(SCRIPT, "make_big.lookup") is not None


def test_the_function_info_names_the_user_helpers_datasets_hashes_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script function (pickled by value) reaching helpers of the user's module three ways — a
    function imported by name, `module.function`, and a method of an object — records each helper
    with its code hash; the source texts are kept for `explain`."""
    import sys

    from cachetool.trace.arguments import describe

    (tmp_path / "myhelpers.py").write_text(
        "def clean(t):\n    return t.strip()\n\n\n"
        "def shout(t):\n    return t.upper()\n\n\n"
        "class Cutter:\n    def cut(self, t):\n        return t[:3]\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "myhelpers", raising=False)
    import myhelpers  # type: ignore[import-not-found]

    script = tmp_path / "script.py"
    script.write_text(
        "import myhelpers\nfrom myhelpers import clean\ncutter = myhelpers.Cutter()\n\n\n"
        "def step(ex):\n    return {'t': cutter.cut(myhelpers.shout(clean(ex['t'])))}\n",
        encoding="utf-8",
    )
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    sources: dict[str, dict[str, object]] = {}
    info = describe(namespace["step"], sources)
    assert info.by_reference is False and info.qualname == "step"
    assert sorted(str(d.qualname) for d in info.deps) == [
        "myhelpers.Cutter.cut",
        "myhelpers.clean",
        "myhelpers.shout",
    ]
    assert all(d.code_hash and d.source_hash in sources for d in info.deps)
    direct = describe(myhelpers.clean, sources)
    assert direct.by_reference is True and direct.deps == ()


def fail_then_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: str, after: str = ""
) -> dict[str, str]:
    """Under `cachetool run`, a CSV of `rows` mapped by a helper of the user's own module that
    raises (the run fails), then the same pipeline with the helper fixed (same fingerprint:
    datasets hashes it by name); `after` is more of the chain. CACHETOOL_HOME is the runs'; the
    runs' environment."""
    from tests.conftest import cachetool_run, hf_env

    (tmp_path / "d.csv").write_text("text\n" + rows, encoding="utf-8")
    (tmp_path / "helpers.py").write_text("def n(ex):\n    raise ValueError('not ready')\n", encoding="utf-8")
    (tmp_path / "p.py").write_text(
        "from datasets import load_dataset\nfrom helpers import n\n"
        f"load_dataset('csv', data_files='d.csv', split='train').map(n){after}\n",
        encoding="utf-8",
    )
    env = hf_env(tmp_path)
    assert cachetool_run("p.py", env=env, cwd=tmp_path, warm=True, check=False).returncode == 1
    (tmp_path / "helpers.py").write_text("def n(ex):\n    return {'n': len(ex['text'])}\n", encoding="utf-8")
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    monkeypatch.setenv("CACHETOOL_HOME", env["CACHETOOL_HOME"])
    return env


def test_a_step_that_failed_last_time_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A map whose function raised in the previous run (a helper of the user's own module, fixed
    since: datasets hashes it by name, so the fingerprint is the same) is explained as having
    failed then, with the error, not as "no recorded argument differs"; the filter after it, run
    for the first time, says so itself (not as a heading over every step of the run)."""
    env = fail_then_fix(tmp_path, monkeypatch, "ab\ncd\n", ".filter(lambda ex: ex['n'] > 1)")
    (mapped,) = [s for s in explain_run(tmp_path / "cache").steps if s.step.operation == "map"]
    assert [r.kind for r in mapped.reasons] == ["failed-before"], mapped.reasons
    assert "ValueError: not ready" in mapped.reasons[0].message
    # Only the filter runs for the first time: said at the filter, not as a heading of the run.
    human = CliRunner().invoke(app, ["explain", "--last"], env={**env, "COLUMNS": "200"}).stdout
    assert "First time this step ran" not in human, human
    at = human.index(". filter ")
    assert "first time this step ran" in human[at:] and "first time" not in human[:at], human


@pytest.mark.parametrize("default", ["missing", "empty"])
def test_last_where_nothing_was_recorded_names_the_root_the_last_run_wrote_in(
    runs: ExplainRuns, tmp_path: Path, default: str
) -> None:
    """A pipeline that caches under `cache_dir=` records its runs there, not in the default
    cache: `explain --last` in the default cache (not made yet, or holding no run) says so in
    one line and gives the command that explains the run; that command works."""
    home = tmp_path / "cache"
    if default == "empty":
        home.mkdir()
    env = {"CACHETOOL_HOME": runs.env["CACHETOOL_HOME"], "HF_DATASETS_CACHE": str(home), "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["explain", "--last"], env=env)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    command = f"cachetool explain --last --cache-dir {runs.cache}"
    assert line.endswith(f"the last traced run recorded steps in {runs.cache}: `{command}`"), line
    followed = CliRunner().invoke(app, command.split()[1:], env=env)
    assert followed.exit_code == 1 and "Stale cache hits" in followed.stdout, followed.output


def test_show_says_an_entry_is_stale_as_lineage_does(runs: ExplainRuns) -> None:
    """`show` of an entry computed before a helper of the user's module was edited (and reused
    after) says it is stale, in the facts and as `"stale"` in `--json`; a fresh entry says nothing."""
    env = {"CACHETOOL_HOME": runs.env["CACHETOOL_HOME"], "COLUMNS": "200"}
    stale, fresh = runs.second["stale"], runs.second["threshold"]
    human = CliRunner().invoke(app, ["show", stale, "--cache-dir", str(runs.cache)], env=env)
    assert human.exit_code == 0, human.output
    assert re.search(r"^\s*stale\s+yes: code changed \(`cachetool explain ", human.stdout, re.M), human.stdout
    doc = json.loads(
        CliRunner().invoke(app, ["show", stale, "--json", "--cache-dir", str(runs.cache)], env=env).stdout
    )
    assert doc["stale"] == "stale: code changed", doc.get("stale")
    other = CliRunner().invoke(app, ["show", fresh, "--json", "--cache-dir", str(runs.cache)], env=env)
    assert json.loads(other.stdout)["stale"] is None


def test_report_lists_the_stale_hits_as_problems(runs: ExplainRuns, tmp_path: Path) -> None:
    """`cachetool report` of a cache whose hits reused results of edited helper functions lists
    those stale entries among its problems, as `verify --stale` and `explain` report them; it
    said "0 problem(s)"."""
    env = {"CACHETOOL_HOME": runs.env["CACHETOOL_HOME"], "COLUMNS": "200"}
    args = ["report", "-o", str(tmp_path / "r.html"), "--json", "--cache-dir", str(runs.cache)]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    problems = json.loads(result.stdout)["problems"]
    stale = {runs.second["stale"], runs.second["stale_dep"]}
    listed = [p for p in problems if any(fp in p["path"] for fp in stale)]
    assert len(listed) == 2 and all(p["severity"] == "error" for p in listed), problems
    assert all("changed since it was computed" in p["what"] or "stale" in p["what"] for p in listed), listed


def test_another_split_slice_is_named_and_the_loaded_source_not_called_recomputed(tmp_path: Path) -> None:
    """A pipeline loads `split="train[:10%]"`, then `train[:20%]` (the prepared split is loaded
    from the cache both times): `explain --last` says of the map after it that another split was
    asked for, with both, and that `load_dataset` loaded another result, not that it "was
    recomputed because the source dataset changed"."""
    from tests.conftest import cachetool_run, hf_env, invoke

    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(50)), encoding="utf-8")
    script = (
        "import sys\nfrom datasets import load_dataset\n"
        "ds = load_dataset('csv', data_files='d.csv', split=sys.argv[1])\n"
        "ds.map(lambda ex: {'y': ex['x'] + 1})\n"
    )
    (tmp_path / "p.py").write_text(script, encoding="utf-8")
    env = hf_env(tmp_path)
    cachetool_run("p.py", "train[:10%]", env=env, cwd=tmp_path, warm=True)
    cachetool_run("p.py", "train[:20%]", env=env, cwd=tmp_path, warm=True)
    said = " ".join(invoke("explain", "--last", env=env, columns=80).stdout.split())
    assert "another split was asked for (train[:10%] → train[:20%])" in said, said
    assert "was recomputed" not in said and "source dataset changed" not in said, said
    assert "load_dataset @ p.py:3 loaded another result because" in said, said
