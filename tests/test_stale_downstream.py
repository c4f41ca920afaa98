"""An edited helper of the user's own module leaves stale results downstream too: every entry
derived from a stale entry is stale, `explain`, `verify --stale` and `lineage --descendants` say
so, and the one command the hint gives removes them all, so that the next run computes the
helper's new behaviour through to the last step. (The hint used to remove the stale entry only:
the rerun recomputed it under the same fingerprint, every later step reused its old file, the
final data stayed wrong, and explain and verify then said all was well.)"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests.conftest import cachetool_run, invoke
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    from conftest import cachetool_run, invoke  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

HELPERS = textwrap.dedent(
    """\
    def clean_text(text):
        return text.strip().lower()
    """
)
# load -> map calling the helper -> map -> filter; prints the last step's uppercase letters.
PIPELINE = textwrap.dedent(
    """\
    import json
    import os

    from datasets import load_dataset

    from helpers import clean_text

    here = os.path.dirname(os.path.abspath(__file__))


    def clean(ex):
        return {"text": clean_text(ex["text"])}


    def add_len(ex):
        return {"n": len(ex["text"])}


    def keep(ex):
        return ex["n"] > 3


    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    a = ds.map(clean)
    b = a.map(add_len)
    c = b.filter(keep)
    upper = sum(ch.isupper() for t in c["text"] for ch in t)
    print(json.dumps({"fps": [a._fingerprint, b._fingerprint, c._fingerprint], "upper": upper}))
    """
)


def _project(base: Path) -> tuple[Path, dict[str, str]]:
    project = base / "project"
    project.mkdir()
    rows = "".join(f"{i},  Hello World number {i}\n" for i in range(20))
    (project / "data.csv").write_text("id,text\n" + rows, encoding="utf-8")
    (project / "helpers.py").write_text(HELPERS, encoding="utf-8")
    (project / "pipeline.py").write_text(PIPELINE, encoding="utf-8")
    return project, subprocess_env(base, HF_DATASETS_CACHE=str(base / "cache"), COLUMNS="80")


def _run(project: Path, env: dict[str, str]) -> dict[str, object]:
    proc = cachetool_run(project / "pipeline.py", env=env, cwd=project, timeout=240, warm=True)
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`cachetool ARGS` run in this process (`invoke`) under `env`, as at a terminal of its
    COLUMNS (80 unless given): its exit status and output."""
    said = invoke(*args, env=env, columns=int(env.get("COLUMNS", "80")))
    return subprocess.CompletedProcess(["cachetool", *args], said.exit_code, said.stdout, said.stderr)


def _edit_helper(project: Path) -> None:
    # Stop lowercasing: the fingerprints stay the same (datasets hashes the helper by name).
    (project / "helpers.py").write_text(HELPERS.replace(".lower()", ""), encoding="utf-8")


def _replace_in(path: Path, old: str, new: str) -> None:
    """Edit the file at `path` as the user does between two runs."""
    path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")


def _hint_command(stderr: str) -> list[str]:
    """The `cachetool gc ...` command a hint gives, as argv."""
    start = stderr.index("`cachetool gc ")
    return shlex.split(stderr[start + 1 : stderr.index("`", start + 1)])


def test_following_the_hint_removes_every_stale_entry_and_the_data_comes_out_right(tmp_path: Path) -> None:
    """After the helper is edited, explain --last flags the stale entry and both entries made
    from it, verify --stale reports all three and lineage --descendants marks them; the gc
    command of the hint (with --cache-dir) removes the three at once, the next run computes the
    helper's new behaviour through to the last step, and explain and verify are then clean."""
    project, env = _project(tmp_path)
    cache = str(tmp_path / "cache")
    first = _run(project, env)
    assert first["upper"] == 0
    fps = first["fps"]
    assert isinstance(fps, list)
    _edit_helper(project)
    run = cachetool_run(project / "pipeline.py", env=env, cwd=project, timeout=240, warm=True)
    second = json.loads(run.stdout.strip().splitlines()[-1])
    assert second["fps"] == fps and second["upper"] == 0  # reused: the stale result
    # The run itself says so, and its hint removes all three.
    assert "warning: this run loaded 3 stale result(s)" in run.stderr, run.stderr
    assert "`clean_text` in helpers.py changed" in run.stderr, run.stderr
    assert set(fps) <= set(_hint_command(run.stderr)), run.stderr

    explained = _cli(env, "explain", "--last", "--json")
    assert explained.returncode == 1, explained.stderr
    stale = json.loads(explained.stdout)["stale"]
    assert [s["fingerprint"] for s in stale] == fps
    assert stale[1]["derived_from"]["fingerprint"] == fps[0]
    human = _cli(env, "explain", "--last")
    assert human.returncode == 1
    command = _hint_command(human.stderr)
    assert command[:2] == ["cachetool", "gc"] and set(fps) <= set(command)
    assert command[-4:] == ["--min-age", "0", "--cache-dir", cache]
    assert "new_fingerprint=" in human.stderr
    for line in human.stdout.splitlines():
        assert len(line) <= 80, line

    verified = _cli(env, "verify", "--stale", "--json")
    assert verified.returncode == 1
    found = {f["entry"] for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"}
    assert found == set(fps)
    one = _cli(env, "explain", fps[0])  # the stale step alone: its hint removes what follows too
    assert one.returncode == 1 and set(fps) <= set(_hint_command(one.stderr)), one.stderr

    lineage = _cli(env, "lineage", fps[0], "--descendants", "--json")
    assert lineage.returncode == 0, lineage.stderr
    marks = {s["fingerprint"]: s["stale"] for s in json.loads(lineage.stdout)["steps"]}
    assert marks == dict.fromkeys(fps, True)
    text = _cli(env, "lineage", fps[0], "--descendants").stdout
    assert text.count("stale") >= 3, text

    removed = _cli(env, *command[1:], "--yes")
    assert removed.returncode == 0, removed.stderr
    run = cachetool_run(project / "pipeline.py", env=env, cwd=project, timeout=240, warm=True)
    assert "stale" not in run.stderr, run.stderr
    third = json.loads(run.stdout.strip().splitlines()[-1])
    assert third["fps"] == fps
    assert third["upper"] == 20 * 2  # "Hello World" in every row: the new helper's output

    after = _cli(env, "explain", "--last", "--json")
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["stale"] == []
    assert _cli(env, "verify", "--stale").returncode == 0


def test_an_input_recomputed_by_changed_code_makes_what_was_made_from_it_stale(tmp_path: Path) -> None:
    """Removing only the stale entry (as the hint once said) recomputes it with the new code under
    the same fingerprint; the entries made from its old file are then stale, and explain --last
    and verify --stale say so, naming the recomputed input."""
    project, env = _project(tmp_path)
    fps = _run(project, env)["fps"]
    assert isinstance(fps, list)
    _edit_helper(project)
    removed = _cli(env, "gc", fps[0], "--min-age", "0", "--cache-dir", str(tmp_path / "cache"), "--yes")
    assert removed.returncode == 0, removed.stderr
    run = cachetool_run(project / "pipeline.py", env=env, cwd=project, timeout=240, warm=True)
    assert json.loads(run.stdout.strip().splitlines()[-1])["upper"] == 0  # still wrong: the later
    assert "warning: this run loaded 2 stale result(s)" in run.stderr, run.stderr  # steps reused old files

    explained = _cli(env, "explain", "--last", "--json")
    assert explained.returncode == 1, explained.stdout
    stale = json.loads(explained.stdout)["stale"]
    assert [s["fingerprint"] for s in stale] == fps[1:]
    assert all(s["derived_from"]["fingerprint"] == fps[0] for s in stale)
    human = _cli(env, "explain", "--last")
    assert "recomputed" in human.stdout, human.stdout
    verified = _cli(env, "verify", "--stale", "--json")
    assert verified.returncode == 1
    found = {f["entry"] for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"}
    assert found == set(fps[1:])


GENERATOR_HELPERS = textwrap.dedent(
    """\
    def label(i):
        return f"Item {i}".lower()
    """
)
# The generator calls a helper of the user's module: datasets hashes the generator, and the
# helper by name.
GENERATOR = textwrap.dedent(
    """\
    import json

    from datasets import Dataset

    from helpers import label


    def rows():
        for i in range(20):
            yield {"text": label(i)}


    def add_len(ex):
        return {"n": len(ex["text"])}


    ds = Dataset.from_generator(rows)
    a = ds.map(add_len)
    upper = sum(ch.isupper() for t in a["text"] for ch in t)
    print(json.dumps({"fps": [ds._fingerprint, a._fingerprint], "upper": upper}))
    """
)


def test_a_helper_of_a_generator_makes_its_dataset_and_what_follows_stale(tmp_path: Path) -> None:
    """`Dataset.from_generator` with a generator that calls a helper of the user's module: once
    the helper is edited, the generated dataset (reused by datasets) and the map made from it are
    stale for explain --last and verify --stale, as for a mapped function's helper; the hint's
    command (with --include-sources: the generated dataset is a source) removes both, and the next
    run shows the new helper's output."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "helpers.py").write_text(GENERATOR_HELPERS, encoding="utf-8")
    (project / "pipeline.py").write_text(GENERATOR, encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"), COLUMNS="80")
    fps = _run(project, env)["fps"]
    assert isinstance(fps, list)
    (project / "helpers.py").write_text(GENERATOR_HELPERS.replace(".lower()", ""), encoding="utf-8")
    assert _run(project, env)["upper"] == 0  # the old dataset, reused

    explained = _cli(env, "explain", "--last", "--json")
    assert explained.returncode == 1, explained.stdout
    assert [s["fingerprint"] for s in json.loads(explained.stdout)["stale"]] == fps
    verified = _cli(env, "verify", "--stale", "--json")
    assert verified.returncode == 1
    found = {f["entry"] for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"}
    assert found == set(fps)

    command = _hint_command(_cli(env, "explain", "--last").stderr)
    assert "--include-sources" in command, command
    removed = _cli(env, *command[1:], "--yes")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert _run(project, env)["upper"] == 20  # "Item": the new helper's output
    assert _cli(env, "verify", "--stale").returncode == 0


# The new user's pipeline: csv + json -> concatenate -> map calling the helper (num_proc=2) ->
# cast_column -> train_test_split -> filter -> DatasetDict.save_to_disk -> load_from_disk -> map.
# The last map writes its cache files inside the saved folder, a cache root of its own.
SAVED_PIPELINE = textwrap.dedent(
    """\
    import json
    import sys

    import datasets
    from datasets import ClassLabel, concatenate_datasets

    from helpers import clean_text

    if "--no-cache" in sys.argv:
        datasets.disable_caching()
    csv_ds = datasets.load_dataset("csv", data_files="train.csv", split="train")
    js = datasets.load_dataset("json", data_files="extra.jsonl", split="train")
    ds = concatenate_datasets([csv_ds, js.cast(csv_ds.features)])
    ds = ds.map(lambda b: {"text": [clean_text(t) for t in b["text"]]}, batched=True, num_proc=2)
    ds = ds.cast_column("label", ClassLabel(names=["neg", "pos"]))
    dd = ds.train_test_split(test_size=0.2, seed=1)
    dd = dd.filter(lambda x: len(x["text"]) > 5)
    dd.save_to_disk("saved_dd")
    re = datasets.load_from_disk("saved_dd")
    re = re.map(lambda x: {"n": len(x["text"])})
    fps = {split: re[split]._fingerprint for split in re}
    print(json.dumps({"fps": fps, "upper": sum(t.count("A") for t in re["train"]["text"])}))
    """
)


def _saved_project(base: Path) -> tuple[Path, dict[str, str]]:
    project = base / "project"
    project.mkdir()
    words = ["Alpha", "beta", "Gamma", "delta"]
    lines = (" ".join(words[(i * 7 + j) % 4] for j in range(1 + i % 5)) for i in range(360))
    rows = [(text, "pos" if i % 3 else "neg") for i, text in enumerate(lines)]
    (project / "train.csv").write_text(
        "text,label\n" + "".join(f"{t},{label}\n" for t, label in rows[:300]), encoding="utf-8"
    )
    (project / "extra.jsonl").write_text(
        "".join(json.dumps({"text": t, "label": label}) + "\n" for t, label in rows[300:]), encoding="utf-8"
    )
    (project / "helpers.py").write_text("def clean_text(s):\n    return s.lower()\n", encoding="utf-8")
    (project / "prep.py").write_text(SAVED_PIPELINE, encoding="utf-8")
    return project, subprocess_env(base, HF_DATASETS_CACHE=str(base / "cache"), COLUMNS="80")


def _gc_commands(stderr: str) -> list[list[str]]:
    """Every `cachetool gc ...` command the hints give, as argv, in order."""
    out = []
    for chunk in stderr.split("`cachetool gc ")[1:]:
        out.append(shlex.split("cachetool gc " + chunk[: chunk.index("`")]))
    return out


def _cache_dir(command: list[str]) -> str:
    return command[command.index("--cache-dir") + 1]


def test_stale_results_reach_into_a_saved_folder_and_the_hints_remove_them_there_too(tmp_path: Path) -> None:
    """A DatasetDict saved with save_to_disk, loaded again and mapped: the map writes its cache
    files inside the saved folder, a cache root of its own. Once the helper is edited, explain
    --last in the cache root flags the stale entries of both roots (the map's files in the saved
    folder were made from the stale results through save_to_disk and load_from_disk) and its hints
    give one gc command per root; explain --last and verify --stale in the saved folder flag them
    too, and lineage --descendants marks them. Following every hint and rerunning prints what the
    pipeline prints with caching disabled; explain --last and verify --stale are then clean in both
    roots, and explain of the edited step no longer reports the reuses before it was recomputed.
    (The saved folder's entries used to go unmentioned: the rerun rewrote the saved data, the map
    after load_from_disk got the same fingerprint, reused its old file, and the final data stayed
    wrong.)"""
    project, env = _saved_project(tmp_path)
    cache, saved = str(tmp_path / "cache"), str(project / "saved_dd")

    said: list[str] = []  # each run's stderr

    def run(*args: str) -> dict[str, object]:
        proc = cachetool_run(project / "prep.py", *args, env=env, cwd=project, timeout=240, warm=True)
        said.append(proc.stderr)
        out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
        return out

    first = run()
    assert first["upper"] == 0
    assert run() == first  # every step loaded from the cache
    (project / "helpers.py").write_text("def clean_text(s):\n    return s.strip()\n", encoding="utf-8")
    assert run() == first  # the stale results, reused
    warned = said[-1]  # the run says so for each root, with one gc command per root
    # The user-visible truth: the same project, run plainly with caching disabled.
    truth_dir = tmp_path / "truth"
    truth_dir.mkdir()
    for name in ("train.csv", "extra.jsonl", "helpers.py", "prep.py"):
        (truth_dir / name).write_bytes((project / name).read_bytes())
    truth = subprocess.run(
        [sys.executable, "prep.py", "--no-cache"],
        env=env,
        cwd=truth_dir,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert truth.returncode == 0, truth.stderr[-3000:]
    expected = json.loads(truth.stdout.strip().splitlines()[-1])["upper"]
    assert expected > 0
    fps = first["fps"]
    assert isinstance(fps, dict)
    in_saved = set(fps.values())  # the map after load_from_disk: its files are in saved_dd

    explained = _cli(env, "explain", "--last", "--json")
    assert explained.returncode == 1, explained.stderr
    items = json.loads(explained.stdout)["stale"]
    stale = {s["fingerprint"] for s in items}
    # the map calling the helper, cast_column, train_test_split and filter (2 splits each)
    assert in_saved <= stale and len(stale - in_saved) == 6, stale
    assert {s["fingerprint"] for s in items if s["root"] == saved} == in_saved
    edited = items[0]["fingerprint"]
    assert items[0]["changes"] and items[0]["derived_from"] is None
    human = _cli(env, "explain", "--last")
    assert human.returncode == 1
    commands = _gc_commands(human.stderr)
    assert [_cache_dir(c) for c in commands] == [cache, saved], human.stderr
    assert set(commands[0]) & stale == stale - in_saved
    assert set(commands[1]) & stale == in_saved
    for line in human.stdout.splitlines():
        assert len(line) <= 80 or line == f"  {saved}", line  # a path stays whole

    verified = _cli(env, "verify", "--stale", "--json")  # the cache root: every stale entry there
    assert verified.returncode == 1
    found = {f["entry"] for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"}
    assert found == stale - in_saved
    lineage = _cli(env, "lineage", edited, "--descendants", "--json")
    assert lineage.returncode == 0, lineage.stderr
    marked = {s["fingerprint"] for s in json.loads(lineage.stdout)["steps"] if s["stale"]}
    assert marked == stale

    for args in (("explain", "--last", "--json"), ("verify", "--stale", "--json")):
        there = _cli(env, *args, "--cache-dir", saved)
        assert there.returncode == 1, there.stdout + there.stderr
        doc = json.loads(there.stdout)
        found = (
            {s["fingerprint"] for s in doc["stale"]}
            if "stale" in doc
            else {f["entry"] for f in doc["findings"] if f["severity"] == "error"}
        )
        assert in_saved <= found, (args, found)

    # The run's own warnings: one per root, each with the gc command of its root.
    assert "this run loaded 6 stale result(s)" in warned, warned
    assert f"this run loaded {len(in_saved)} stale result(s)" in warned, warned
    from_run = _gc_commands(warned)
    assert [_cache_dir(c) for c in from_run] == [cache, saved], warned
    assert set(from_run[0]) & stale == stale - in_saved and set(from_run[1]) & stale == in_saved
    # Following the cache root's command only: the rerun recomputes the edited step under the same
    # fingerprint and reuses the saved folder's map files made from its old result, and says so.
    removed = _cli(env, *from_run[0][1:], "--yes")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert run()["upper"] != expected
    rest = _gc_commands(said[-1])
    assert [_cache_dir(c) for c in rest] == [saved], said[-1]
    assert set(rest[0]) & stale == in_saved, said[-1]
    removed = _cli(env, *rest[0][1:], "--yes")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    final = run()
    assert final["fps"] == fps and final["upper"] == expected
    assert "stale" not in said[-1], said[-1]

    for root in (cache, saved):
        after = _cli(env, "explain", "--last", "--json", "--cache-dir", root)
        assert after.returncode == 0, after.stdout + after.stderr
        assert json.loads(after.stdout)["stale"] == []
        verified = _cli(env, "verify", "--stale", "--cache-dir", root)
        assert verified.returncode == 0, verified.stdout
    # The edited step, recomputed: its stale reuses before that are history, not a finding.
    again = _cli(env, "explain", edited, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["stale"] == [], again.stdout


def test_a_constant_a_helper_reads_is_an_edit_of_the_helper(tmp_path: Path) -> None:
    """A helper of the user's module reads a constant of another module of theirs
    (`config.SUFFIX`) and one of its own (`PREFIX`), and fills a dict of its module as it runs
    (no edit: a second run warns of nothing). `datasets` hashes the helper by name, so an edited
    constant keeps every fingerprint: the run warns that it loaded stale results and names the
    constant, `explain --last` and `verify --stale` flag the entry and what was made from it, and
    the hint's command removes them so that the next run computes the new value."""
    project = tmp_path / "project"
    project.mkdir()
    helpers = (
        'import config\n\nPREFIX = ""\nSEEN = {}\n\n\ndef clean_text(text):\n'
        "    SEEN[text] = len(SEEN)  # a value the helper fills as it runs: no edit\n"
        "    return PREFIX + text.strip() + config.SUFFIX\n"
    )
    (project / "helpers.py").write_text(helpers, encoding="utf-8")
    (project / "config.py").write_text('SUFFIX = "!"\n', encoding="utf-8")
    (project / "pipeline.py").write_text(
        PIPELINE.replace(
            'sum(ch.isupper() for t in c["text"] for ch in t)', 'sum(t.count("?") for t in c["text"])'
        ),
        encoding="utf-8",
    )
    (project / "data.csv").write_text(
        "id,text\n" + "".join(f"{i},  Hello World number {i}\n" for i in range(20)), encoding="utf-8"
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"), COLUMNS="80")
    fps = _run(project, env)["fps"]
    assert isinstance(fps, list)
    again = cachetool_run(project / "pipeline.py", env=env, cwd=project, timeout=240, warm=True)
    assert "stale" not in again.stderr, again.stderr  # SEEN was filled by the first run's map
    (project / "config.py").write_text('SUFFIX = "?"\n', encoding="utf-8")
    run = cachetool_run(project / "pipeline.py", env=env, cwd=project, timeout=240, warm=True)
    assert json.loads(run.stdout.strip().splitlines()[-1])["upper"] == 0  # the old results, reused
    assert "this run loaded 3 stale result(s)" in run.stderr and "`config.SUFFIX`" in run.stderr, run.stderr

    explained = _cli(env, "explain", "--last", "--json")
    assert explained.returncode == 1, explained.stdout
    assert [s["fingerprint"] for s in json.loads(explained.stdout)["stale"]] == fps
    verified = _cli(env, "verify", "--stale", "--json")
    found = {f["entry"] for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"}
    assert verified.returncode == 1 and found == set(fps), verified.stdout
    removed = _cli(env, *_hint_command(run.stderr)[1:], "--yes")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert _run(project, env)["upper"] == 20

    (project / "helpers.py").write_text(helpers.replace('PREFIX = ""', 'PREFIX = "> "'), encoding="utf-8")
    run = cachetool_run(project / "pipeline.py", env=env, cwd=project, timeout=240, warm=True)
    assert "this run loaded 3 stale result(s)" in run.stderr and "`PREFIX`" in run.stderr, run.stderr


def test_a_helper_reached_through_package_attributes_two_modules_deep_is_an_edit(tmp_path: Path) -> None:
    """The map calls `textpkg.a.norm(...)` (a package attribute), and `norm` calls
    `textpkg.b.clean_text` (another): `datasets` hashes `textpkg` by name, so an edit of
    `clean_text` in b.py keeps every fingerprint. The run warns that it loaded 3 stale results
    and names the helper, and `verify --stale` flags the three (it said nothing before)."""
    project, env = _project(tmp_path)
    package = project / "textpkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "b.py").write_text(HELPERS, encoding="utf-8")
    (package / "a.py").write_text(
        "import textpkg.b\n\n\ndef norm(text):\n    return textpkg.b.clean_text(text)\n", encoding="utf-8"
    )
    script = (project / "pipeline.py").read_text(encoding="utf-8")
    script = script.replace("from helpers import clean_text", "import textpkg.a")
    script = script.replace("clean_text(ex", "textpkg.a.norm(ex")
    (project / "pipeline.py").write_text(script, encoding="utf-8")
    fps = _run(project, env)["fps"]
    assert isinstance(fps, list)
    (package / "b.py").write_text(HELPERS.replace(".lower()", ""), encoding="utf-8")
    run = cachetool_run(project / "pipeline.py", env=env, cwd=project, timeout=240, warm=True)
    assert json.loads(run.stdout.strip().splitlines()[-1])["fps"] == fps
    assert "this run loaded 3 stale result(s)" in run.stderr, run.stderr
    assert "`clean_text` in b.py changed" in run.stderr, run.stderr
    verified = _cli(env, "verify", "--stale", "--json")
    found = {f["entry"] for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"}
    assert verified.returncode == 1 and found == set(fps), verified.stdout


def test_a_method_a_callable_object_reaches_through_self_is_an_edit(tmp_path: Path) -> None:
    """`ds.map(Norm())`, a callable object of the user's module whose `__call__` calls
    `self.clean(...)`, inherited from its base class: once `Base.clean` is edited (`datasets`
    pickles the object by its class's name), the run warns that it loaded a stale result, naming
    `Base.clean`, and `verify --stale` flags it. They said nothing."""
    (tmp_path / "helpers.py").write_text(
        "class Base:\n    def clean(self, t):\n        return t.strip()\n\n\n"
        "class Norm(Base):\n    def __call__(self, r):\n        return {'u': self.clean(r['t'])}\n",
        encoding="utf-8",
    )
    (tmp_path / "p.py").write_text(
        "import datasets\nfrom helpers import Norm\n"
        "ds = datasets.Dataset.from_dict({'t': [' a ', ' b ']})\n"
        "ds.save_to_disk('saved') if not __import__('os').path.exists('saved') else None\n"
        "print(datasets.load_from_disk('saved').map(Norm())[0]['u'])\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    assert cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout == "a\n"
    _replace_in(tmp_path / "helpers.py", "t.strip()", "t.strip() + '.'")
    run = cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    assert run.stdout == "a\n"  # the old result, reused
    said = " ".join(run.stderr.split())
    assert "this run loaded 1 stale result(s)" in said and "`Base.clean` in helpers.py changed" in said, said
    verified = _cli(env, "verify", "--stale", "--cache-dir", str(tmp_path / "saved"))
    assert verified.returncode == 1 and "`Base.clean` in helpers.py changed" in verified.stdout, verified


def test_a_class_value_a_method_reads_through_self_is_an_edit(tmp_path: Path) -> None:
    """`ds.filter(Keep())`, whose `__call__` reads `self.LIMIT`, a value of its class: once `LIMIT`
    is edited in the class body (`datasets` pickles the object by its class's name, and `LIMIT`
    is not the object's own), the run warns that it loaded a stale result, naming `Keep.LIMIT`.
    It said nothing."""
    (tmp_path / "helpers.py").write_text(
        "class Keep:\n    LIMIT = 5\n\n    def __call__(self, r):\n        return r['n'] > self.LIMIT\n",
        encoding="utf-8",
    )
    (tmp_path / "p.py").write_text(
        "import datasets\nfrom helpers import Keep\n"
        "ds = datasets.Dataset.from_dict({'n': list(range(10))})\n"
        "print(len(ds.filter(Keep(), cache_file_name='./f.arrow')))\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    assert cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout == "4\n"
    _replace_in(tmp_path / "helpers.py", "LIMIT = 5", "LIMIT = 7")
    run = cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    said = " ".join(run.stderr.split())
    assert run.stdout == "4\n" and "(the value of `Keep.LIMIT` it reads)" in said, said


def test_a_staticmethod_or_classmethod_called_through_its_class_is_an_edit(tmp_path: Path) -> None:
    """Maps calling `Text.up(...)` (a classmethod) and `Text.clean(...)` (a staticmethod) of the
    user's module: once `up` is edited, the run warns that it loaded a stale result, naming
    `Text.up`; once `clean` is too, two, the first naming `Text.clean`. It said nothing (only plain
    functions of a class were followed)."""
    (tmp_path / "helpers.py").write_text(
        "class Text:\n    @staticmethod\n    def clean(t):\n        return t.strip()\n\n"
        "    @classmethod\n    def up(cls, t):\n        return t.upper()\n",
        encoding="utf-8",
    )
    (tmp_path / "p.py").write_text(
        "import datasets\nfrom helpers import Text\n"
        "ds = datasets.Dataset.from_dict({'t': [' a ']})\n"
        "u = ds.map(lambda r: {'u': Text.clean(r['t'])}, cache_file_name='./u.arrow')[0]['u']\n"
        "v = ds.map(lambda r: {'v': Text.up(r['t'])}, cache_file_name='./v.arrow')[0]['v']\n"
        "print(repr(u), repr(v))\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    first = cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout
    for old, new, stale, name in (
        ("t.upper()", "t.upper() + '!'", 1, "up"),
        ("t.strip()", "t.strip() + '.'", 2, "clean"),
    ):
        _replace_in(tmp_path / "helpers.py", old, new)
        run = cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
        said = " ".join(run.stderr.split())
        assert run.stdout == first and f"this run loaded {stale} stale result(s)" in said, said
        assert f"`Text.{name}` in helpers.py changed" in said, said


def test_a_helper_given_as_a_default_argument_or_in_fn_kwargs_is_an_edit(tmp_path: Path) -> None:
    """Four maps of the same rows: `def step(r, fix=clean)` mapped, `given` mapped with
    `fn_kwargs={"fix": clean}`, `functools.partial(given, fix=clean)`, and `Step(clean)` whose
    `__call__` calls `self.fix`, `clean` from the user's module (`datasets` pickles it by name):
    once `clean` is edited the run warns that it loaded 4 stale results (one for each way of
    giving it), naming `clean`. It said nothing (the partial and the object's attribute said
    nothing until their functions were followed too)."""
    script = (
        "import functools\n\nimport datasets\nfrom helpers import clean\n\n\n"
        "def step(r, fix=clean):\n    return {'u': fix(r['t'])}\n\n\n"
        "def given(r, fix):\n    return {'u': fix(r['t'])}\n\n\n"
        "class Step:\n    def __init__(self, fix):\n        self.fix = fix\n\n"
        "    def __call__(self, r):\n        return {'u': self.fix(r['t'])}\n\n\n"
        "ds = datasets.Dataset.from_dict({'t': [' a ']})\n"
        "a = ds.map(step, cache_file_name='./a.arrow')[0]['u']\n"
        "b = ds.map(given, fn_kwargs={'fix': clean}, cache_file_name='./b.arrow')[0]['u']\n"
        "c = ds.map(functools.partial(given, fix=clean), cache_file_name='./c.arrow')[0]['u']\n"
        "d = ds.map(Step(clean), cache_file_name='./d.arrow')[0]['u']\n"
        "print(a, b, c, d)\n"
    )
    _clean_edited(tmp_path, script, 4, "a a a a\n")


TOK = (
    "class Tok:\n    def __init__(self, n):\n        self.n = n\n\n"
    "    def encode(self, t):\n        return t[: self.n]\n"
)


def _edited_rerun(base: Path, helpers: str, script: str, old: str, new: str) -> tuple[str, str]:
    """Run `script` beside `helpers` (helpers.py) under `cachetool run`, replace `old` by `new` in
    helpers.py and run it again: the first run's stdout, and the second run's stdout and stderr
    (its whitespace folded), once both runs printed the same."""
    (base / "helpers.py").write_text(helpers, encoding="utf-8")
    (base / "p.py").write_text(script, encoding="utf-8")
    env = subprocess_env(base, HF_DATASETS_CACHE=str(base / "cache"))
    first = cachetool_run("p.py", env=env, cwd=base, warm=True).stdout
    _replace_in(base / "helpers.py", old, new)
    run = cachetool_run("p.py", env=env, cwd=base, warm=True)
    assert run.stdout == first, (first, run.stdout)  # the old result, reused
    return first, " ".join(run.stderr.split())


def _clean_edited(base: Path, script: str, stale: int, first: str | None = None) -> None:
    """`_edited_rerun` of `script` beside a helpers.py whose `clean(t)` strips `t`, edited to add
    a period: the first run printed `first` (when given), and the second warns that it loaded
    `stale` stale results, naming `clean`."""
    helpers = "def clean(t):\n    return t.strip()\n"
    printed, said = _edited_rerun(base, helpers, script, "t.strip()", "t.strip() + '.'")
    assert first in (None, printed) and f"this run loaded {stale} stale result(s)" in said, (printed, said)
    assert "`clean` in helpers.py changed" in said, said


def test_an_object_of_a_user_class_given_in_fn_kwargs_a_default_or_a_closure_is_an_edit(
    tmp_path: Path,
) -> None:
    """Three maps call `tok.encode(...)` of a `Tok` from the user's module, the object given in
    `fn_kwargs`, as a default argument, and in a closure (`datasets` pickles it by its class's
    name): once `Tok.encode` is edited, the run warns that it loaded 3 stale results, naming
    `Tok.encode`. It said nothing (only a function given so, or an object named as a global,
    was followed)."""
    script = (
        "import datasets\nfrom helpers import Tok\n\n\n"
        "def given(r, tok):\n    return {'u': tok.encode(r['t'])}\n\n\n"
        "def default(r, tok=Tok(2)):\n    return {'v': tok.encode(r['t'])}\n\n\n"
        "def make(tok):\n    def closed(r):\n        return {'w': tok.encode(r['t'])}\n\n"
        "    return closed\n\n\n"
        "ds = datasets.Dataset.from_dict({'t': ['abcdef']})\n"
        "a = ds.map(given, fn_kwargs={'tok': Tok(3)}, cache_file_name='./a.arrow')[0]['u']\n"
        "b = ds.map(default, cache_file_name='./b.arrow')[0]['v']\n"
        "c = ds.map(make(Tok(4)), cache_file_name='./c.arrow')[0]['w']\n"
        "print(a, b, c)\n"
    )
    first, said = _edited_rerun(tmp_path, TOK, script, "t[: self.n]", "t[: self.n].upper()")
    assert first == "abc ab abcd\n" and "this run loaded 3 stale result(s)" in said, said
    assert "`Tok.encode` in helpers.py changed" in said, said


def test_a_class_or_an_object_reached_through_the_users_module_is_an_edit(tmp_path: Path) -> None:
    """Maps calling `helpers.Tok(3).encode(...)` (a class of the user's module reached as a module
    attribute) and `helpers.TOK.encode(...)` (an object made in that module): once `Tok.encode` is
    edited, the run warns that it loaded 2 stale results, naming `Tok.encode`. It said nothing
    (only functions were followed through a module, not classes and objects)."""
    script = (
        "import datasets\nimport helpers\n\nds = datasets.Dataset.from_dict({'t': ['abcdef']})\n"
        "a = ds.map(lambda r: {'u': helpers.Tok(3).encode(r['t'])}, cache_file_name='./a.arrow')[0]['u']\n"
        "b = ds.map(lambda r: {'v': helpers.TOK.encode(r['t'])}, cache_file_name='./b.arrow')[0]['v']\n"
        "print(a, b)\n"
    )
    helpers = TOK + "\n\nTOK = Tok(2)\n"
    first, said = _edited_rerun(tmp_path, helpers, script, "t[: self.n]", "t[: self.n].upper()")
    assert first == "abc ab\n" and "this run loaded 2 stale result(s)" in said, said
    assert "`Tok.encode` in helpers.py changed" in said, said


def test_a_helper_a_generator_is_given_in_gen_kwargs_is_an_edit(tmp_path: Path) -> None:
    """`Dataset.from_generator(gen, gen_kwargs={"fix": clean})`, `clean` from the user's module
    (`datasets` hashes it by name): once `clean` is edited, the run warns that it loaded a stale
    result, naming `clean`. It said nothing (what a generator is given was not followed)."""
    script = (
        "from datasets import Dataset\nfrom helpers import clean\n\n\n"
        "def gen(fix):\n    for t in [' a ', ' b ']:\n        yield {'w': fix(t)}\n\n\n"
        "print(Dataset.from_generator(gen, gen_kwargs={'fix': clean})['w'])\n"
    )
    _clean_edited(tmp_path, script, 1)


def test_a_helper_a_function_imports_in_its_body_is_an_edit(tmp_path: Path) -> None:
    """Two maps import the user's helpers.py in their body (`import helpers`, `from helpers import
    clean`), as one does for num_proc workers: once `clean` is edited, the run warns that it
    loaded 2 stale results, naming `clean`. It said nothing: the module is imported only when the
    map runs (never, on a cache hit), so it was not among what the function was seen to reach."""
    script = (
        "import datasets\n\n\ndef f(r):\n    import helpers\n\n    return {'u': helpers.clean(r['t'])}\n\n\n"
        "def g(r):\n    from helpers import clean\n\n    return {'v': clean(r['t'])}\n\n\n"
        "ds = datasets.Dataset.from_dict({'t': [' a ']})\n"
        "u = ds.map(f, cache_file_name='./m.arrow')[0]['u']\n"
        "print(u, ds.map(g, cache_file_name='./n.arrow')[0]['v'])\n"
    )
    _clean_edited(tmp_path, script, 2, "a a\n")


def test_a_file_a_generator_is_given_by_name_edited_leaves_its_dataset_stale(tmp_path: Path) -> None:
    """`Dataset.from_generator(gen, gen_kwargs={"path": "words.txt"})`, the generator reading the
    file, then a map: once words.txt gets a third line, `datasets` reuses the two-row dataset
    (it hashes the file's name only). The run warns that it loaded 2 stale results, naming the
    file, `verify --stale` flags both, each with the file's reason (the map's hint said `datasets`
    hashes functions by name), and the gc command of the hint makes the next run read the file
    anew. All said nothing ("Nothing was recomputed")."""
    (tmp_path / "words.txt").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "p.py").write_text(
        "from datasets import Dataset\n\n\ndef gen(path):\n    with open(path) as f:\n"
        "        for line in f:\n            yield {'w': line.strip()}\n\n\n"
        "ds = Dataset.from_generator(gen, gen_kwargs={'path': 'words.txt'})\n"
        "print(ds.map(lambda r: {'u': r['w'].upper()})['u'])\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"), COLUMNS="80")
    first = cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout
    assert "'A', 'B']" in first
    (tmp_path / "words.txt").write_text("a\nb\nc\n", encoding="utf-8")
    run = cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    said = " ".join(run.stderr.split())
    assert run.stdout == first and "this run loaded 2 stale result(s)" in said, said
    assert "a file its generator reads changed (words.txt: size 4 → 6 bytes)" in said, said
    verified = _cli(env, "verify", "--stale", "--json")
    errors = [f for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"]
    assert verified.returncode == 1 and len(errors) == 2, verified.stdout
    for f in errors:  # the map made from it too: the file's reason, not "hashes functions by name"
        assert "names of the files a generator is given" in f["hint"], f
    chain = " ".join(_cli(env, "lineage", errors[-1]["entry"]).stdout.split())
    assert "[stale: a file it reads changed]" in chain, chain  # the generator's step, not "code changed"
    removed = _cli(env, *_hint_command(run.stderr)[1:], "--yes")
    assert removed.returncode == 0, removed.stderr
    again = cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    assert "'A', 'B', 'C']" in again.stdout and "stale" not in again.stderr, again


def test_a_named_cache_file_of_an_earlier_version_of_the_step_is_said_stale(tmp_path: Path) -> None:
    """A map given `cache_file_name=` is edited: `datasets` loads the named file whatever the new
    fingerprint, so the run gets the old rows. The run says so: the file, the fingerprint it was
    written under and the step's own; a run whose file matches says nothing."""
    script = tmp_path / "p.py"
    code = (
        "import datasets\n"
        "ds = datasets.Dataset.from_dict({{'x': list(range(10))}})\n"
        "ds = ds.map(lambda ex: {{'y': ex['x'] + 1}}, cache_file_name={!r})\n"
        "print(ds[0]['y'], ds._fingerprint)\n"
    ).format(str(tmp_path / "named" / "m.arrow"))
    (tmp_path / "named").mkdir()
    script.write_text(code, encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    first = cachetool_run(script, env=env, cwd=tmp_path, warm=True)
    again = cachetool_run(script, env=env, cwd=tmp_path, warm=True)
    assert again.stdout == first.stdout and "warning" not in again.stderr, again.stderr
    script.write_text(code.replace("+ 1", "+ 2"), encoding="utf-8")
    edited = cachetool_run(script, env=env, cwd=tmp_path, warm=True)
    old_fp, new_fp = first.stdout.split()[1], edited.stdout.split()[1]
    assert edited.stdout.split()[0] == "1" and new_fp != old_fp  # the old rows, reused
    said = " ".join(edited.stderr.split())
    assert str(tmp_path / "named" / "m.arrow") in said and old_fp in said and new_fp in said, said
    assert "probably stale" in said, said


def test_a_named_cache_file_of_an_earlier_version_is_stale_for_explain_and_verify(tmp_path: Path) -> None:
    """After a run whose edited map loaded its `cache_file_name=` file of the earlier version (and
    filtered those old rows), `explain --last` lists the file among the stale hits, `lineage` marks
    it "stale: written under FP" (it said "code changed") and `verify --stale` flags it and the
    filter's result made from it; the gc command of verify's hint removes both, so the next run
    computes the new rows. Only the run's own warning said so."""
    named = tmp_path / "named"
    named.mkdir()
    code = (
        "import datasets\n"
        "ds = datasets.Dataset.from_dict({{'x': list(range(10))}})\n"
        "m = ds.map(lambda ex: {{'y': ex['x'] + 1}}, cache_file_name={!r})\n"
        "print(sum(m.filter(lambda ex: ex['y'] > 5)['y']))\n"
    ).format(str(named / "m.arrow"))
    (tmp_path / "p.py").write_text(code, encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    assert cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout.split() == ["40"]
    (tmp_path / "p.py").write_text(code.replace("+ 1", "+ 2"), encoding="utf-8")
    assert cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout.split() == ["40"]  # the old rows
    explained = " ".join(_cli(env, "explain", "--last", "--cache-dir", str(named)).stdout.split())
    assert "Stale cache hits: cache entry m.arrow" in explained, explained
    assert "written under fingerprint" in explained, explained
    forest = _cli(env, "lineage", "-a", str(named / "m.arrow"), "--cache-dir", str(named))
    traced = " ".join(forest.stdout.split())
    assert re.search(r"stale: written under [0-9a-f]{16}\b", traced) and "code changed" not in traced, traced
    verified = _cli(env, "verify", "--stale", "--cache-dir", str(named), "--json")
    findings = [f for f in json.loads(verified.stdout)["findings"] if f["severity"] == "error"]
    assert verified.returncode == 1 and len(findings) == 2, verified.stdout
    hint = next(f["hint"] for f in findings if f["path"].endswith("m.arrow"))
    assert _cli(env, *_hint_command(hint)[1:], "-y").returncode == 0
    assert cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout.split() == ["51"]


def test_the_run_warning_removes_every_stale_result_it_counts(tmp_path: Path) -> None:
    """A DatasetDict's two splits are filtered by a helper whose constant is then edited: the run
    warns of 2 stale results, and the one gc command it gives removes both (it named the first
    split's only), so the next run computes both splits with the new value."""
    (tmp_path / "helpers.py").write_text(
        "LIMIT = 5\n\n\ndef keep(n):\n    return n > LIMIT\n", encoding="utf-8"
    )
    for split in ("train", "test"):
        rows = "".join(json.dumps({"n": i}) + "\n" for i in range(20))
        (tmp_path / f"{split}.jsonl").write_text(rows, encoding="utf-8")
    (tmp_path / "p.py").write_text(
        "from datasets import load_dataset\nfrom helpers import keep\n"
        "dd = load_dataset('json', data_files={'train': 'train.jsonl', 'test': 'test.jsonl'})\n"
        "dd = dd.filter(lambda ex: keep(ex['n']))\n"
        "print(sum(len(d) for d in dd.values()))\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    assert cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout.split()[-1] == "28"
    (tmp_path / "helpers.py").write_text(
        "LIMIT = 9\n\n\ndef keep(n):\n    return n > LIMIT\n", encoding="utf-8"
    )
    run = cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    assert "this run loaded 2 stale result(s)" in run.stderr, run.stderr
    removed = _cli(env, *_hint_command(run.stderr)[1:], "--yes")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert cachetool_run("p.py", env=env, cwd=tmp_path, warm=True).stdout.split()[-1] == "20"
