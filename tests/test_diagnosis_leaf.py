"""check-determinism names the exact object that differs (the path to the leaf), never a parent,
on what users write: dataclass configs on `self`, enums, unseeded numpy generators, two culprits in
one step. Real scripts (tests/diagnosis) checked by the real command in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cachetool.fingerprint.tree import DEFAULT_MAX_NODES, build_tree, iter_nodes
from tests.conftest import hf_env
from tests.corpus_pipeline import once, write_pipeline

HERE = Path(__file__).parent


#: The scripts of tests/diagnosis, checked as one pipeline (tests/corpus_pipeline.py: each runs as
#: `python SCRIPT` would, one after the other in one interpreter) by the real command.
SCRIPTS = (
    "leaf_two_culprits_deep.py",
    "leaf_getstate_pair.py",
    "leaf_random_on_self.py",
    "leaf_object_array.py",
    "leaf_features_from_set.py",
    "leaf_generator_global_from_set.py",
    "leaf_csv_column_names_from_set.py",
    "leaf_cast_features_from_set.py",
    "leaf_dataset_in_closure.py",
    "leaf_from_list_key_order.py",
    "leaf_digest_of_set_text.py",
    "leaf_generator_fingerprint_given.py",
)
#: Scripts that make more than one difference (each other script makes one).
DIFFERENCES = {"leaf_dataset_in_closure.py": 2}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`cachetool check-determinism pipeline.py --format json` of the pipeline of SCRIPTS, run in
    a folder of its own (once per session): its JSON document."""

    def run(folder: Path) -> dict[str, Any]:
        write_pipeline(folder / "pipeline.py", SCRIPTS, HERE / "diagnosis")
        argv = [sys.executable, "-m", "cachetool", "check-determinism", "pipeline.py", "--format", "json"]
        done = subprocess.run(
            argv, cwd=folder, env=hf_env(folder), capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 1, done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    return once(tmp_path_factory, "diagnosis-leaf", run)[1]


def difference_of(script: str, report: dict[str, Any], operation: str | None = None) -> dict[str, Any]:
    """The one difference the steps of `script` (its `operation`) made in the report on the
    pipeline."""
    differences = report["differences"]
    mine = [d for d in differences if d["call_site"]["file"] == str(HERE / "diagnosis" / script)]
    assert len(mine) == DIFFERENCES.get(script, 1), differences
    assert len(differences) == sum(DIFFERENCES.get(s, 1) for s in SCRIPTS), differences
    (found,) = [d for d in mine if operation in (None, d["operation"])]
    return found


@pytest.mark.slow
def test_two_culprits_deep_in_dataclasses_are_each_named_at_the_leaf(checked: dict[str, Any]) -> None:
    """The frozenset four dataclasses down and the RandomState beside the config are both named,
    each by its full path; no parent (the config, a dataclass) is named instead. Before, the
    classes of the dataclasses (expanded by value, first) used up the tree's node budget, so the
    report stopped at `.config (Config)` and never reached the generator."""
    difference = difference_of(SCRIPTS[0], checked)
    (culprit,) = difference["culprits"]
    assert (culprit["argument"], culprit["path"]) == ("function", [])  # the callable, split in places
    places = {(tuple(p["path"]), p["type"], p["kind"]) for p in culprit["parts"]}
    assert places == {
        ((".config", ".outer", ".inner", ".leaf", ".stop"), "frozenset", "set-order"),
        ((".rs",), "numpy.RandomState", "random-state"),
    }


@pytest.mark.slow
def test_a_getstate_pair_that_is_not_dict_and_slots_is_named_by_its_item(checked: dict[str, Any]) -> None:
    """`__getstate__` returning `(vocab, tuple(stop))` is a state of its own, not pickle's
    `(dict, slots)` pair: the culprit is `state → [1]`, the tuple in hash-seed order. Before, the
    pair was read as a dict and slots, the tuple was dropped, and the report named the whole
    object (`function (Tok)`)."""
    difference = difference_of(SCRIPTS[1], checked)
    (culprit,) = difference["culprits"]
    assert (culprit["argument"], culprit["path"], culprit["type"]) == ("function", ["state", "[1]"], "tuple")
    assert culprit["kind"] == "order"


@pytest.mark.slow
def test_an_unseeded_random_random_is_named_as_a_generator(checked: dict[str, Any]) -> None:
    """`random.Random()` on the callable is the culprit, with a seed hint. Before, its pickled
    state was decomposed: `.rng → state[1]` "differs in 63 places", each an int with a value hint
    (some read as timestamps)."""
    (culprit,) = difference_of("leaf_random_on_self.py", checked)["culprits"]
    assert (culprit["path"], culprit["type"], culprit["kind"]) == ([".rng"], "random.Random", "random-state")
    assert not culprit["parts"] and "random.Random(42)" in culprit["hint"]


@pytest.mark.slow
def test_frozensets_in_a_numpy_object_array_are_named_by_index(checked: dict[str, Any]) -> None:
    """Each frozenset of the array is named (`closure 'table'[0]` ...) with the frozenset hint.
    Before, the array was a leaf: `closure 'table' (numpy.ndarray)` with a hash-seed hint."""
    (culprit,) = difference_of("leaf_object_array.py", checked)["culprits"]
    assert culprit["path"] == ["closure 'table'"]
    places = [(tuple(p["path"]), p["type"], p["kind"]) for p in culprit["parts"]]
    assert places == [(("closure 'table'", f"[{i}]"), "frozenset", "set-order") for i in range(3)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "argument", "path", "type_"),
    [
        ("leaf_features_from_set.py", "features", ["['label']", ".names"], "list"),
        ("leaf_generator_global_from_set.py", "generator", ["global 'WORDS'"], "list"),
        ("leaf_csv_column_names_from_set.py", "column_names", [], "list"),
    ],
)
def test_a_source_configured_from_a_set_names_its_configuration(
    checked: dict[str, Any], script: str, argument: str, path: list[str], type_: str
) -> None:
    """`features=`, a csv's `column_names=` and a generator are hashed into the name of the
    source's cache folder: the culprit is the list built from a set inside them (order), not a
    data file. Before, only the folder's name was said to differ, with the hint for a data file
    rewritten before each run."""
    difference = difference_of(script, checked)
    culprits = difference["culprits"]
    places = [(c["argument"], p["path"], p["type"], p["kind"]) for c in culprits for p in c["parts"] or [c]]
    assert (argument, path, type_, "order") in places, difference


@pytest.mark.slow
def test_a_cast_names_the_features_the_map_inside_it_hashed(checked: dict[str, Any]) -> None:
    """`cast` hashes nothing itself: the map `datasets` runs inside it, from the same input in
    every run, hashes `features=` (and its own `table_cast` function of the schema, which follows
    from them: not named). Before, "no recorded argument differs; the difference is in what
    datasets hashed internally": the features of that map were taken for a dataset (a type of the
    `datasets` package) and skipped."""
    difference = difference_of("leaf_cast_features_from_set.py", checked)
    assert (difference["kind"], difference["differing_arguments"]) == ("arguments", ["features"])
    (culprit,) = difference["culprits"]
    places = {(tuple(p["path"]), p["kind"]) for p in culprit["parts"]}
    assert (("['label']", ".names"), "order") in places, difference


@pytest.mark.slow
def test_a_dataset_the_function_holds_is_named_as_a_dataset(checked: dict[str, Any]) -> None:
    """The lookup dataset made from a set is a cause (its column's first row), and the map whose
    function holds it another, whose culprit is that dataset with a hint that says what it is.
    Before, the hint was that of a value from hash() of a string."""
    made = difference_of("leaf_dataset_in_closure.py", checked, "from_dict")
    assert made["kind"] == "source" and "column 'word' row 0" in made["source_differences"]
    held = difference_of("leaf_dataset_in_closure.py", checked, "map")
    (culprit,) = held["culprits"]
    assert (culprit["path"], culprit["type"], culprit["kind"]) == (
        ["global 'lookup'"],
        "datasets.Dataset",
        "dataset",
    )
    assert "holds a dataset" in culprit["hint"]


@pytest.mark.slow
def test_columns_in_another_order_are_named_as_such(checked: dict[str, Any]) -> None:
    """`from_list` of rows keyed from a set: "columns order" with each run's order, which the
    report reads as the same inputs in another order, with its hint. Before, no column differed
    and the report said only that the data was built at run time."""
    difference = difference_of("leaf_from_list_key_order.py", checked)
    orders = difference["source_differences"]["columns order"]
    assert len(set(orders)) == 2 and len({tuple(sorted(o.split(", "))) for o in orders}) == 1, difference


@pytest.mark.slow
def test_a_digest_an_equal_hash_seed_repeats_follows_the_hash_seed(checked: dict[str, Any]) -> None:
    """An md5 hex digest of `str(set)` reads as a uuid; the run with an equal hash seed gave it
    again, so it is a `hash-seed` culprit with that hint. Before: "a uuid is made at run time",
    beside "depends on PYTHONHASHSEED"."""
    difference = difference_of("leaf_digest_of_set_text.py", checked)
    (culprit,) = difference["culprits"]
    assert (culprit["path"], culprit["kind"]) == (["global 'CONFIG_KEY'"], "hash-seed"), difference
    assert difference["variation"] == "PYTHONHASHSEED" and "uuid" not in culprit["hint"]


@pytest.mark.slow
def test_a_fingerprint_given_to_from_generator_is_the_one_cause(checked: dict[str, Any]) -> None:
    """`from_generator(fingerprint=uuid4().hex)` is a `given` cause and the map after it its
    downstream step. Before, the root was a source difference with the hint for a data file
    rewritten before each run, and the map a second cause ("the source dataset differs"): the
    root was recorded with the fingerprint `datasets` replaces by the given one after it."""
    difference = difference_of("leaf_generator_fingerprint_given.py", checked)
    assert (difference["operation"], difference["kind"], difference["cascade"]) == (
        "from_generator",
        "given",
        1,
    )


def test_values_and_classes_each_have_a_node_budget() -> None:
    """Values that fill the node budget leave the attributes of a class hashed by value (defined
    in a function, as in a script's `__main__`) in the tree: a frozenset class attribute is a
    culprit too. The classes come after the values, with a budget of their own."""

    class Tok:
        STOP = frozenset({"the", "a", "in", "on", "and", "cat", "dog", "bird"})

        def __init__(self) -> None:
            self.rows = [{"a": i, "b": [i, i + 1, i + 2], "c": {"d": [i]}} for i in range(64)]
            self.more = [{"a": i, "b": [i, i + 1, i + 2]} for i in range(64)]

    paths = {path for path, _ in iter_nodes(build_tree(Tok()))}
    assert ("class", ".STOP") in paths
    assert (".more", "[63]", "['b']", "[2]") in paths
    assert len(paths) <= 2 * DEFAULT_MAX_NODES


# A script's own classes pickle by value: their methods' code is in the hash tree too.
SUMMARIZED = """\
import dataclasses, json
from cachetool.fingerprint.tree import as_node, iter_nodes
from cachetool.trace.arguments import summarize


@dataclasses.dataclass(frozen=True)
class Cfg:
    tags: frozenset
    name: str = "x"


class Pre:
    def __init__(self, words):
        self.opts = {"cfg": Cfg(tags=frozenset(words)), "n": 3}

    def run(self, ex):
        return {"a": sum(w in self.opts["cfg"].tags for w in ex["text"].split())}


summary = summarize(Pre(["quick", "fox", "the", "number", "lazy", "dog"]).run)
print(json.dumps([[list(path), n.get("t")] for path, n in iter_nodes(as_node(summary))]))
"""


def test_the_ledger_keeps_the_path_to_a_frozenset_in_a_dataclass_in_a_dict_on_self(tmp_path: Path) -> None:
    """A script maps `pre.run`, `pre.opts["cfg"].tags` a frozenset of str in a frozen dataclass:
    the summary the ledger keeps of the function reaches it, so `explain` says it depends on
    PYTHONHASHSEED. It stopped at `.opts['cfg']` ("differs below the levels the ledger keeps of
    it"): the script's classes, walked first, used the whole budget of visits on their methods."""
    (tmp_path / "s.py").write_text(SUMMARIZED, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "s.py"],
        cwd=tmp_path,
        env=hf_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert [["__self__", ".opts", "['cfg']", ".tags"], "frozenset"] in found, found


def test_a_source_configured_differently_is_said_so_without_the_data_file_hint() -> None:
    """A source whose folder name differs because an argument does (`features=`) reads as that
    argument and its culprit; the hint for a data file rewritten before each run is left out (it
    was the only hint before)."""
    from cachetool.determinism.verdict import Cause, SourceDiff, Step, cause_lines
    from cachetool.fingerprint.diff import diff_trees

    names = [["pos", "neg", "mixed"], ["neg", "mixed", "pos"]]
    culprit = diff_trees("features", [build_tree({"label": {"names": n}}) for n in names])
    assert culprit is not None
    step = Step(0, (0, 0), "root", "load_dataset", "", "/p/prep.py", 3, None, False, ("a", "b"), ((), ()))
    folders = ("json/default-f64eef66d1ec918f/0.0.0", "json/default-fa3879fc2e72a188/0.0.0")
    cause = Cause(
        step, "source", ("features",), (culprit,), source_diffs=(SourceDiff("relative_data_dir", folders),)
    )
    text = "\n".join(cause_lines(cause))
    assert "load_dataset is configured differently in each run" in text
    assert "differing argument(s): features" in text
    assert "culprit: features['label']['names'] (list of 3 str)" in text, text
    assert "rewritten" not in text and "no argument differs" not in text, text


def test_a_dict_keyed_by_tuples_from_sets_is_told_to_sort_the_keys() -> None:
    """Keys that are the same items in another order in each run (`tuple(set(...))`): the hint
    says to make the keys sorted. Before, it said the dict was built by iterating a set (its
    values are the same), and sorting the dict fixes nothing."""
    from cachetool.fingerprint.diff import diff_trees

    runs = [
        {("cats", "cat", "kitten"): "feline", ("dog", "puppy"): "canine"},
        {("kitten", "cat", "cats"): "feline", ("puppy", "dog"): "canine"},
    ]
    culprit = diff_trees("function", [build_tree(groups) for groups in runs])
    assert culprit is not None and culprit.path == () and culprit.kind == "order"
    assert "tuple(sorted(words))" in culprit.hint, culprit.hint


def test_values_drawn_into_one_list_are_one_culprit() -> None:
    """`random.sample(range(100), 10)` in a global list: the list is the culprit, with one hint,
    and its items are its leaves. Before: "differs in 10 places", the same hint for each item."""
    from cachetool.fingerprint.diff import diff_trees

    runs = [[86, 61, 78, 85, 67, 0, 1], [8, 99, 6, 25, 15, 0, 1]]
    culprit = diff_trees("function", [build_tree({"keep": ids}) for ids in runs])
    assert culprit is not None and culprit.path == ("['keep']",) and culprit.kind == "value"
    assert not culprit.parts and len(culprit.leaves) == 5
