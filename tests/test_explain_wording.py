"""explain words a difference that is not the user's the way check-determinism does, by the kind
of the part that differs: a time taken at run time "changes on every run", a set pickled in
hash-seed order "depends on PYTHONHASHSEED". (Both read "pickles differently in every process".)"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

try:  # tests/ may or may not be a package
    from tests.conftest import cachetool_run, invoke
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    from conftest import cachetool_run, invoke  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

#: Three maps that recompute in a second run of the pipeline with no edit, each for a reason that
#: is not the user's: an earlier map fills a module global the later `count` reads (the second run
#: loads that map, so the global stays empty: cache state); a callable object keeps
#: `datetime.now()` on `self` (a time taken at run time); a closure holds a frozenset of str
#: (pickled in hash-seed order).
NOT_YOURS = textwrap.dedent(
    """\
    import datetime
    import os

    from datasets import load_dataset

    here = os.path.dirname(os.path.abspath(__file__))
    SEEN = []


    def record(ex):
        SEEN.append(ex["x"])
        return ex


    def count(ex):
        return {"k": len(SEEN)}


    ds = load_dataset("csv", data_files=os.path.join(here, "d.csv"), split="train")
    ds = ds.map(record)
    ds.map(count)


    class Stamp:
        def __init__(self):
            self.created = datetime.datetime.now()

        def __call__(self, ex):
            return {"y": ex["x"] + 1}


    ds.map(Stamp())


    def make():
        stop = frozenset(f"w{i}" for i in range(30))
        return lambda ex: {"s": str(ex["x"]) in stop}


    ds.map(make())
    """
)


@pytest.fixture(scope="module")
def not_yours(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """NOT_YOURS run twice on one cache under `cachetool run`: explain --last, as JSON and for a
    person. Only the three maps recompute, each explained as its test expects."""
    base = tmp_path_factory.mktemp("not-yours")
    (base / "p.py").write_text(NOT_YOURS, encoding="utf-8")
    (base / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(10)), encoding="utf-8")
    env = subprocess_env(base, HF_DATASETS_CACHE=str(base / "cache"))
    # The first run forked warm, the second a fresh interpreter: two hash seeds.
    cachetool_run("p.py", env=env, cwd=base, warm=True)
    cachetool_run("p.py", env=env, cwd=base)
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    lines = [s["call_site"]["line"] for s in doc["steps"]]
    assert lines == [21, 32, 40], doc["steps"]  # count, Stamp(), make(): nothing else recomputed
    return doc, invoke("explain", "--last", env=env).stdout


def _reason(doc: dict[str, Any], line: int) -> dict[str, Any]:
    """The one reason explain gives for the step called at p.py:`line`."""
    (step,) = [s for s in doc["steps"] if s["call_site"]["line"] == line]
    (reason,) = step["reasons"]
    return dict(reason)


def test_a_time_taken_at_run_time_changes_on_every_run(not_yours: tuple[dict[str, Any], str]) -> None:
    """A callable object that keeps `datetime.now()` on `self`: the second run recomputes its
    map, and explain says the object's time "changes on every run", not a change of the user's,
    with the check-determinism command."""
    reason = _reason(not_yours[0], 32)
    assert reason["kind"] == "nondeterministic", reason
    assert "created" in reason["path"], reason
    assert "changes on every run" in reason["message"], reason
    assert "pickles differently" not in reason["message"], reason
    assert "cachetool check-determinism" in reason["message"], reason


def test_a_global_an_earlier_map_changed_is_cache_state_not_an_edit(
    not_yours: tuple[dict[str, Any], str],
) -> None:
    """An earlier map fills a module global that a later map's function reads. The first run
    computes both; the second loads the first map from the cache, so the global stays empty and
    the later map recomputes. explain says what check-determinism says: its state differs between
    a run that computed the earlier step and one that loaded it (cache state, with the hint to
    build the object before the first map), not that the user changed `SEEN`."""
    doc, human = not_yours
    reason = _reason(doc, 21)
    assert reason["kind"] == "cache-state", reason
    assert "SEEN" in reason["path"], reason
    assert "a run that computed" in reason["message"] and "map record" in reason["message"], reason
    assert "p.py:20" in reason["message"] and "before the first map" in reason["hint"], reason
    assert "changed [" not in human and "not a change of yours" in human, human


def test_a_frozenset_depends_on_the_hash_seed(not_yours: tuple[dict[str, Any], str]) -> None:
    """Control: a frozenset of str in a closure pickles in hash-seed order: explain says it
    "depends on PYTHONHASHSEED", as check-determinism does."""
    reason = _reason(not_yours[0], 40)
    assert reason["kind"] == "nondeterministic", reason
    assert "depends on PYTHONHASHSEED" in reason["message"], reason
    assert "PYTHONHASHSEED" in reason["hint"], reason


CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize(
    ("script", "path", "words"),
    [
        ("s01_data_files_from_set.py", "data_files", "the same 5 data files in another order"),
        ("s02_gen_kwargs_from_set.py", "gen_kwargs['paths']", "depends on PYTHONHASHSEED"),
    ],
)
def test_a_source_given_its_inputs_in_a_sets_order_is_not_called_changed(
    script: str, path: str, words: str, tmp_path: Path
) -> None:
    """data_files (or a generator's paths) built from a set: two runs under other hash seeds load
    the same files in another order. explain says so, in check-determinism's words and hint, not
    that "the source dataset changed"."""
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    first = cachetool_run(CORPUS / script, env={**env, "PYTHONHASHSEED": "1"}, cwd=CORPUS).stdout.split()[-1]
    for seed in range(2, 9):  # five paths (their folder is the test's) may share an order under two seeds
        again = cachetool_run(CORPUS / script, env={**env, "PYTHONHASHSEED": str(seed)}, cwd=CORPUS)
        if again.stdout.split()[-1] != first:
            break
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    reason = doc["steps"][0]["reasons"][0]
    assert reason["kind"] == "nondeterministic" and reason["path"].startswith(path), reason
    assert words in reason["message"] and "sorted(" in reason["hint"], reason
    assert "source dataset changed" not in reason["message"], reason


def _two_runs(tmp_path: Path, script: str, *, edit: tuple[str, str] | None = None) -> dict:
    """Run `script` twice on one cache (applying `edit` to it in between): explain --last --json.
    With `edit`, both runs fork warm (sharing a hash seed: the edit is the difference); without,
    the first forks warm and the second is a fresh interpreter (two hash seeds and random states)."""
    (tmp_path / "p.py").write_text(textwrap.dedent(script), encoding="utf-8")
    (tmp_path / "d.csv").write_text("w\na\nb\nc\n", encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    if edit is not None:
        text = (tmp_path / "p.py").read_text(encoding="utf-8")
        (tmp_path / "p.py").write_text(text.replace(*edit), encoding="utf-8")
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=edit is not None)
    return json.loads(invoke("explain", "--last", "--json", env=env).stdout)


VOCAB = """\
    import os

    from datasets import load_dataset

    here = os.path.dirname(os.path.abspath(__file__))
    VOCAB = {}
    MISSING = -1


    def index(ex):
        VOCAB.setdefault(ex["w"], len(VOCAB))
        return ex


    def encode(ex):
        return {"id": VOCAB.get(ex["w"], MISSING)}


    ds = load_dataset("csv", data_files=os.path.join(here, "d.csv"), split="train")
    ds = ds.map(index)
    ds = ds.map(encode)
    """


def test_a_global_the_user_edits_is_still_their_change(tmp_path: Path) -> None:
    """Control: the first run computed every map, then the user edits a global the later map
    reads; the second run loads the earlier maps (which change nothing). explain says the global
    changed (the user's edit), not the cache state."""
    script = VOCAB.replace("VOCAB = {}", 'VOCAB = {"a": 0}').replace(
        '        VOCAB.setdefault(ex["w"], len(VOCAB))\n', ""
    )
    doc = _two_runs(tmp_path, script, edit=("MISSING = -1", "MISSING = -2"))
    [step] = doc["steps"]
    [reason] = step["reasons"]
    assert reason["kind"] == "argument", reason
    assert "MISSING" in reason["path"], reason
    assert "-1 → -2" in reason["message"], reason


def test_a_first_traced_run_that_loaded_results_does_not_say_the_cache_held_nothing(tmp_path: Path) -> None:
    """A pipeline run plainly (`python p.py`) fills the cache; two maps are edited and the
    pipeline runs under `cachetool run`: the load comes from the cache. explain --last says the
    edited maps ran for the first time with nothing recorded to compare with ("First time each of
    these steps ran", once), not "first run recorded in this cache: it held nothing yet, so every
    step ran" (of a run that loaded a result from that cache)."""
    import subprocess
    import sys

    script = textwrap.dedent(
        """\
        from datasets import load_dataset
        ds = load_dataset("csv", data_files="d.csv", split="train")
        ds = ds.map(lambda ex: {"y": ex["x"] + 1})
        ds = ds.map(lambda ex: {"z": ex["x"] * 2})
        """
    )
    (tmp_path / "p.py").write_text(script, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    subprocess.run([sys.executable, "p.py"], env=env, cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / "p.py").write_text(script.replace("* 2", "* 3").replace("+ 1", "+ 5"), encoding="utf-8")
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)

    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    assert (doc["computed"], doc["loaded"]) == (2, 1), doc
    first = "first time this step ran (nothing recorded to compare with)"
    assert [[r["message"] for r in s["reasons"]] for s in doc["steps"]] == [[first], [first]], doc
    human = invoke("explain", "--last", env=env, columns=80).stdout
    assert "held nothing yet" not in human and "every step ran" not in human, human
    assert human.count("First time each of these steps ran") == 1 and "this step" not in human, human


def test_explain_last_all_roots_does_not_point_at_a_root_whose_steps_it_shows(tmp_path: Path) -> None:
    """A run that maps a dataset loaded back from its `save_to_disk` folder records that map in the
    folder, a cache root of its own. `explain --last` in the cache points there with a hint;
    `explain --last --all-roots` shows that map itself, and gives no hint to go and explain it
    there (it did)."""
    script = textwrap.dedent(
        """\
        from datasets import load_dataset, load_from_disk
        load_dataset("csv", data_files="d.csv", split="train").save_to_disk("saved")
        load_from_disk("saved").map(lambda ex: {"y": ex["x"] + 1})
        """
    )
    (tmp_path / "p.py").write_text(script, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    hint = "also recorded steps in"
    assert hint in invoke("explain", "--last", env=env).stderr
    both = invoke("explain", "--last", "--all-roots", env=env, columns=200)
    assert "map <lambda> @ p.py:3" in both.stdout, both.stdout
    assert hint not in both.stderr, both.stderr


def test_explain_last_all_roots_explains_this_cache_s_latest_run(tmp_path: Path) -> None:
    """Two caches, each with a traced run, the other cache's run later: `explain --last
    --all-roots` in the first explains the first cache's latest run (comparing with every cache),
    as `explain --last` does; it explained the other cache's run, without saying where it ran."""
    script = 'from datasets import load_dataset\nload_dataset("csv", data_files="d.csv", split="train")\n'
    (tmp_path / "p.py").write_text(script, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    cachetool_run("p.py", env={**env, "HF_DATASETS_CACHE": str(tmp_path / "other")}, cwd=tmp_path, warm=True)
    mine = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["run"]
    both = json.loads(invoke("explain", "--last", "--all-roots", "--json", env=env).stdout)["run"]
    assert both == mine


def test_explain_last_of_a_run_that_computed_only_in_another_cache_says_so(tmp_path: Path) -> None:
    """A run loads a saved folder and maps it with `cache_file_name=` in a folder of its own:
    `explain --last` in the saved folder counts the loads there and says the run recorded steps
    in other caches, not that "Nothing was recomputed" (the map was), and its hint's command
    explains the map."""
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    (tmp_path / "p.py").write_text(
        "from datasets import load_dataset\n"
        "load_dataset('csv', data_files='d.csv', split='train').save_to_disk('saved')\n",
        encoding="utf-8",
    )
    (tmp_path / "u.py").write_text(
        "import os\nfrom datasets import load_from_disk\nos.makedirs('out', exist_ok=True)\n"
        "load_from_disk('saved').map(lambda ex: {'y': ex['x'] + 1}, cache_file_name='out/y.arrow')\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    cachetool_run("u.py", env=env, cwd=tmp_path, warm=True)
    said = invoke("explain", "--last", "--cache-dir", str(tmp_path / "saved"), env=env, columns=200)
    assert said.exit_code == 0, said.stderr
    assert "Nothing was recomputed.\n" not in said.stdout, said.stdout
    assert "it recorded steps in other caches too" in said.stdout, said.stdout
    command = said.stderr[said.stderr.index("`cachetool ") + 1 : said.stderr.rindex("`")].split()
    there = invoke(*command[1:], env=env, columns=200)
    assert "map <lambda> @ u.py:4" in there.stdout, there.stdout


LEAVES = """\
    import os
    import uuid
    from dataclasses import dataclass, field

    from datasets import load_dataset

    here = os.path.dirname(os.path.abspath(__file__))


    @dataclass
    class Cfg:
        vocab: set = field(default_factory=lambda: {"al", "be", "ga", "de", "ep", "ze", "et", "th", "io"})


    class Tagger:
        def __init__(self, cfg):
            self.cfg = cfg

        def __call__(self, ex):
            return {"known": ex["w"] in self.cfg.vocab}


    class Tok:
        def __init__(self):
            self.special = frozenset(["[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]", "[B]", "[E]", "[1]"])

        def __getstate__(self):
            return {"special": self.special, "extra": {"<s>", "</s>", "<u>", "<p>", "<a>", "<b>", "<c>"}}


    TOK = Tok()


    def encode(ex):
        return {"special": ex["w"] in TOK.special}


    class Keyed:
        def __init__(self):
            self.key = id(self)
            self.run_id = uuid.uuid4()

        def __call__(self, ex):
            return {"k": 1}


    ds = load_dataset("csv", data_files=os.path.join(here, "d.csv"), split="train")
    ds.map(Tagger(Cfg()))
    ds.map(encode)
    ds.map(Keyed())
    """


def test_each_place_that_varies_is_named_however_deep(tmp_path: Path) -> None:
    """Parts that vary by themselves below what a run records in full are still named, each where
    it is, as check-determinism names them: a set literal in a dataclass field's default factory
    (six steps deep, one object reached by two paths), a set literal in a `__getstate__` and a
    frozenset on the same object (two places), an `id()` and a `uuid4()` on an object (a memory
    address, a UUID); never "changed <Tok object at 0x...>"."""
    doc = _two_runs(tmp_path, LEAVES)
    said = {
        step["function"]: [(r["kind"], r["path"], r["message"]) for r in step["reasons"]]
        for step in doc["steps"]
    }
    tagger = "function → .cfg → class → .__init__ → closure '_dflt_vocab' → code → const[1]"
    assert [r[:2] for r in said["Tagger.__call__"]] == [("nondeterministic", tagger)], said
    assert "depends on PYTHONHASHSEED" in said["Tagger.__call__"][0][2], said
    assert [r[:2] for r in said["encode"]] == [
        ("nondeterministic", "function → global 'TOK' → class → .__getstate__ → code → const[1]"),
        ("nondeterministic", "function → global 'TOK' → .special"),
    ], said
    keyed = {path: message for _, path, message in said["Keyed.__call__"]}
    assert set(keyed) == {"function → .key", "function → .run_id"}, said
    assert "(a memory address)" in keyed["function → .key"], said
    assert "(UUID) changes on every run" in keyed["function → .run_id"], said


def test_a_change_below_what_the_ledger_keeps_is_not_called_nondeterministic(tmp_path: Path) -> None:
    """The user edits a value four objects deep (`CONFIG.model.head.dropout`, which `Config.__init__`
    and `Model` reach too): explain names what holds every place it differs, says the difference
    lies below what the ledger keeps and may be their change; never "not a change of yours" (nor
    "changed <Head object at 0x...> → <Head object at 0x...>")."""
    script = """\
        import os

        from datasets import load_dataset

        here = os.path.dirname(os.path.abspath(__file__))


        class Head:
            def __init__(self):
                self.dropout = 0.1


        class Model:
            def __init__(self):
                self.head = Head()


        class Config:
            def __init__(self):
                self.model = Model()


        CONFIG = Config()


        def scale(ex):
            return {"y": len(ex["w"]) * CONFIG.model.head.dropout}


        ds = load_dataset("csv", data_files=os.path.join(here, "d.csv"), split="train")
        ds.map(scale)
        """
    doc = _two_runs(tmp_path, script, edit=("self.dropout = 0.1", "self.dropout = 0.2"))
    [step] = doc["steps"]
    [reason] = step["reasons"]
    assert reason["kind"] == "argument", reason
    assert reason["path"] == "function → global 'CONFIG'", reason
    assert "below the levels the ledger keeps" in reason["message"], reason
    assert "not a change of yours" not in reason["message"] and "0x" not in reason["message"], reason


def test_a_default_computed_when_the_script_runs_says_so(tmp_path: Path) -> None:
    """`def scale(ex, factor=random.random())`: the function's source is the same in both runs, its
    default is not. explain names the default with both values and says it is computed when the
    script runs, with what to do."""
    script = """\
        import os
        import random

        from datasets import load_dataset

        here = os.path.dirname(os.path.abspath(__file__))


        def scale(ex, factor=random.random()):
            return {"y": len(ex["w"]) * factor}


        ds = load_dataset("csv", data_files=os.path.join(here, "d.csv"), split="train")
        ds.map(scale)
        """
    doc = _two_runs(tmp_path, script)
    [step] = doc["steps"]
    [reason] = step["reasons"]
    assert reason["kind"] == "argument" and reason["path"] == "function → default 'factor'", reason
    assert " → " in reason["message"] and "computed when the script runs" in reason["message"], reason
    assert "inside the function" in reason["hint"], reason


def test_explain_last_points_at_a_later_run_from_this_folder_that_recorded_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pipeline run in the default cache, then another from the same folder that caches only
    under `cache_dir=`: `explain --last` explains the first (the latest in this cache) and says
    that a later run from this folder recorded its steps in the other cache, with the command that
    explains it; that command does. A later run from another folder is not mentioned."""
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20)), encoding="utf-8")
    (tmp_path / "a.py").write_text(
        "from datasets import load_dataset\nload_dataset('csv', data_files='d.csv', split='train')\n",
        encoding="utf-8",
    )
    (tmp_path / "b.py").write_text(
        "from datasets import load_dataset\n"
        "load_dataset('csv', data_files='d.csv', split='train', cache_dir='other').map(lambda ex: ex)\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    cachetool_run("a.py", env=env, cwd=tmp_path, warm=True)
    first = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["run"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "d.csv").write_bytes((tmp_path / "d.csv").read_bytes())
    (elsewhere / "b.py").write_bytes((tmp_path / "b.py").read_bytes())
    cachetool_run("b.py", env=env, cwd=elsewhere, warm=True)
    assert "later traced run" not in invoke("explain", "--last", env=env).stderr

    cachetool_run("b.py", env=env, cwd=tmp_path, warm=True)
    said = invoke("explain", "--last", env=env, columns=200)
    assert said.exit_code == 0 and first in said.stdout, said.stdout
    assert "a later traced run from this folder" in said.stderr, said.stderr
    command = said.stderr[said.stderr.index("`cachetool ") + 1 : said.stderr.rindex("`")].split()
    assert command == ["cachetool", "explain", "--last", "--cache-dir", str(tmp_path / "other")], said.stderr
    there = invoke(*command[1:], env=env, columns=200)
    assert "map <lambda> @ b.py:2" in there.stdout, there.stdout
