"""Hashing as `datasets` does, hash trees, and the diff that names the culprit.

In-process tests compare against the real `datasets.fingerprint.Hasher`; the cross-process tests
run two tiny interpreters (no `datasets` import) with different PYTHONHASHSEED values.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from datasets.fingerprint import Hasher

from cachetool.fingerprint.diff import (
    diff_trees,
    find_unpicklable,
    hint_for,
    render_path,
)
from cachetool.fingerprint.hashing import _replica_dumps, hash_bytes, hash_object, try_hash
from cachetool.fingerprint.tree import build_tree, iter_nodes, node_at

STOP = frozenset(["a", "an", "the", "of"])


class Tagger:
    def __init__(self) -> None:
        self.tags = {"x", "y", "z"}
        self.lock = threading.Lock()
        self.label2id = {"b": 1, "a": 0}

    def __call__(self, example: dict[str, Any]) -> bool:
        return example["t"] in self.tags


def module_function(example: dict[str, Any], k: int = 3) -> bool:
    return example["t"] in STOP


def _closure() -> Any:
    stop = frozenset(["x", "y"])
    offset = 3

    def clean(example: dict[str, Any]) -> dict[str, Any]:
        return {"t": [w for w in example["t"] if w not in stop], "o": offset}

    return clean


SAMPLES: dict[str, Any] = {
    "module function": module_function,
    "closure": _closure(),
    "lambda with set literal": lambda ex: ex["t"] in {"a", "b", "c"},
    "object": Tagger(),
    "bound method": Tagger().__call__,
    "dict": {"b": [1, 2], "a": {"z": None, "y": 1.5}},
    "dict with unorderable keys": {1: "x", "a": "y", (2,): "z"},
    "frozenset": frozenset(["q", "r", "s"]),
    "set": {"q", "r", "s"},
    "partial": functools.partial(module_function, k=5),
    "regex": re.compile(r"\bfoo|bar\b", re.I),
    "numpy array": np.arange(12).reshape(3, 4),
    "arrow table": pa.table({"a": [1, 2, 3]}),
    "chunked table": pa.concat_tables([pa.table({"a": [1]}), pa.table({"a": [2, 3]})]),
    "str": "text",
    "none": None,
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_hash_object_equals_datasets_hasher(name: str) -> None:
    """hash_object gives exactly the digest datasets' Hasher.hash computes."""
    value = SAMPLES[name]
    assert hash_object(value) == Hasher.hash(value)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_replica_pickler_equals_datasets(name: str) -> None:
    """Without datasets imported, the replica pickler produces the same digest."""
    value = SAMPLES[name]
    assert hash_bytes(_replica_dumps(value)) == Hasher.hash(value)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_tree_root_digest_is_the_datasets_digest(name: str) -> None:
    """The root of a hash tree is what datasets computed for that argument; the tree is JSON;
    building it leaves the value's digest unchanged."""
    value = SAMPLES[name]
    before = Hasher.hash(value)
    tree = build_tree(value)
    assert tree["d"] == before == Hasher.hash(value)
    assert json.loads(json.dumps(tree)) == tree


def test_function_tree_shows_code_closure_globals_defaults() -> None:
    """A function pickled by value decomposes into code, closure cells, globals and defaults."""

    def fn(example: dict[str, Any], limit: int = 7, *, mode: str = "fast") -> bool:
        return example["t"] in STOP and len(example) < limit

    labels = [c["l"] for c in build_tree(fn)["c"]]
    assert labels[0] == "code"
    assert "global 'STOP'" in labels
    assert "default 'limit'" in labels
    assert "default 'mode'" in labels
    closure = build_tree(_closure())
    assert {"closure 'stop'", "closure 'offset'"} <= {c["l"] for c in closure["c"]}
    code = closure["c"][0]
    assert code["t"] == "code"
    assert any(c["l"] == "bytecode" for c in code["c"])


def test_module_function_is_a_leaf_like_dill_pickles_it() -> None:
    """A function importable by name is pickled by reference, so its tree has no children."""
    assert "c" not in build_tree(module_function)


def test_method_object_and_partial_parts() -> None:
    tree = build_tree(Tagger().__call__)
    assert [c["l"] for c in tree["c"]] == ["__func__", "__self__"]
    self_labels = {c["l"] for c in tree["c"][1]["c"]}
    assert {".tags", ".lock", ".label2id"} <= self_labels
    partial = build_tree(functools.partial(module_function, 1, k=5))
    assert [c["l"] for c in partial["c"]] == ["func", "args[0]", "keywords['k']"]


def test_every_node_digest_is_the_datasets_digest_of_that_part() -> None:
    """Each node is hashed on its own the way datasets hashes a value."""
    value = {"fn": _closure(), "obj": Tagger(), "n": [1, 2, {"x": frozenset("ab")}]}
    tree = build_tree(value)
    by_path = dict(iter_nodes(tree))
    assert by_path[("['n']", "[2]", "['x']")]["d"] == Hasher.hash(frozenset("ab"))
    assert by_path[("['obj']", ".label2id")]["d"] == Hasher.hash({"b": 1, "a": 0})


def test_big_values_are_single_leaves_and_trees_are_bounded() -> None:
    """Arrays are leaves; depth, node count and container items are bounded."""
    big = np.zeros(1_000_000)
    tree = build_tree({"weights": big, "name": "m"})
    weights = tree["c"][1]
    assert weights["l"] == "['weights']" and "c" not in weights
    assert weights["t"] == "numpy.ndarray"

    deep: list[Any] = []
    cur = deep
    for _ in range(50):
        nxt: list[Any] = []
        cur.append(nxt)
        cur = nxt
    assert any(n.get("x") == "depth" for _, n in iter_nodes(build_tree(deep, max_depth=5)))

    wide = {f"k{i:05d}": i for i in range(5000)}
    tree = build_tree(wide, max_items=10)
    assert tree["x"] == "items" and len(tree["c"]) == 10
    assert sum(1 for _ in iter_nodes(build_tree([[i] for i in range(500)], max_nodes=50))) <= 51


def test_cycles_do_not_recurse_forever() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    tree = build_tree(loop)
    assert tree["d"] == Hasher.hash(loop)
    assert any(n.get("x") == "cycle" for _, n in iter_nodes(tree))


def test_unpicklable_piece_is_found_with_the_real_exception() -> None:
    """The smallest part that cannot be pickled is named, with the exception datasets swallowed."""
    gen = (i for i in range(3))

    def use_gen(example: dict[str, Any]) -> Any:
        return next(gen)

    piece = find_unpicklable("function", build_tree(use_gen))
    assert piece is not None
    assert piece.path == ("closure 'gen'",)
    assert piece.type == "generator"
    assert piece.error == "TypeError: cannot pickle 'generator' object"
    with pytest.raises(TypeError) as excinfo:
        Hasher.hash(use_gen)
    assert str(excinfo.value) in piece.error

    class Enricher:
        def __init__(self) -> None:
            self.table = "country"
            self.conn = sqlite3.connect(":memory:")

    piece = find_unpicklable("function", build_tree(Enricher()))
    assert piece is not None
    assert piece.path_str == "function → .conn (Connection)"
    assert "cannot pickle 'sqlite3.Connection' object" in piece.error
    assert "new_fingerprint=" in piece.hint
    assert find_unpicklable("function", build_tree(module_function)) is None
    assert try_hash(Enricher())[0] is None


def test_render_path() -> None:
    assert render_path("fn_kwargs", ["['seed']"]) == "fn_kwargs['seed']"
    assert render_path("function", ["__self__", ".label2id"]) == "function → __self__ → .label2id"
    assert render_path("function", []) == "function"


def _node(label: str, digest: str | None, children: list[dict[str, Any]] | None = None, **kw: Any) -> dict:
    node: dict[str, Any] = {
        "l": label,
        "t": kw.pop("t", "int"),
        "s": kw.pop("s", "int"),
        "r": kw.pop("r", ""),
    }
    node["d"] = digest
    node.update(kw)
    if children:
        node["c"] = children
    return node


def test_diff_takes_the_deepest_node_holding_every_difference() -> None:
    """Two differing leaves under one object: the culprit is their common parent, with both parts."""
    a = _node(
        "", "r1", [_node("x", "s"), _node("y", "y1", [_node(".p", "p1", r="1"), _node(".q", "q1", r="5")])]
    )
    b = _node(
        "", "r2", [_node("x", "s"), _node("y", "y2", [_node(".p", "p2", r="2"), _node(".q", "q2", r="6")])]
    )
    culprit = diff_trees("function", [a, b])
    assert culprit is not None
    assert culprit.path == ("y",)
    assert [p.path for p in culprit.parts] == [("y", ".p"), ("y", ".q")]
    assert diff_trees("function", [a, a, a]) is None
    # Three runs, only the third differs, on one leaf.
    c = _node(
        "", "r3", [_node("x", "s"), _node("y", "y3", [_node(".p", "p1", r="1"), _node(".q", "q3", r="9")])]
    )
    one = diff_trees("fn_kwargs", [a, a, c])
    assert one is not None and one.path == ("y", ".q") and one.values_str == "5 vs 9"


def test_diff_stops_where_children_no_longer_explain_the_difference() -> None:
    """A node whose children all match (a frozenset's items) is itself the culprit."""
    a = _node("", "r1", [_node("closure 'stop'", "f1", t="frozenset", s="frozenset of 3 str", r="fs")])
    b = _node("", "r2", [_node("closure 'stop'", "f2", t="frozenset", s="frozenset of 3 str", r="fs")])
    culprit = diff_trees("function", [a, b])
    assert culprit is not None
    assert culprit.path_str == "function → closure 'stop' (frozenset of 3 str)"
    assert culprit.kind == "set-order"
    # Children with different labels (a key only in one run): the parent is the culprit.
    d1 = _node("", "d1", [_node("['a']", "1")], t="dict", s="dict of 1")
    d2 = _node("", "d2", [_node("['b']", "1")], t="dict", s="dict of 1")
    assert diff_trees("fn_kwargs", [d1, d2]).path == ()  # type: ignore[union-attr]


def test_hints_follow_what_the_runs_recorded() -> None:
    def runs(t: str, *reprs: str, **kw: Any) -> list[dict[str, Any]]:
        return [_node("", f"d{i}", t=t, r=r, **kw) for i, r in enumerate(reprs)]

    assert hint_for(runs("frozenset", "x", "x"), ["code", "const[1]"])[0] == "set-order"
    assert hint_for(runs("str", "'a, b'", "'b, a'", o="same"))[0] == "order"
    assert hint_for(runs("float", "1795306683.42", "1795306683.51"))[0] == "timestamp"
    assert (
        hint_for(
            runs("str", "'4367a4c5-74f6-4749-a291-29a6333cec5d'", "'0e1141b6-177c-456a-98d6-de063514551b'")
        )[0]
        == "uuid"
    )
    assert hint_for(runs("str", "'/tmp/export-qb9i94c1'", "'/tmp/export-hpgwp334'"))[0] == "temp-path"
    assert (
        hint_for(runs("str", "'<A object at 0x7f9061e72190>'", "'<A object at 0x7f16c67795d0>'"))[0]
        == "address"
    )
    assert hint_for(runs("numpy.Generator", "Generator(PCG64)", "Generator(PCG64)"))[0] == "random-state"
    assert hint_for(runs("int", "4187", "912"))[0] == "value"
    # A run name stamped with time.strftime("%Y%m%d-%H%M%S").
    assert hint_for(runs("str", "'run-20261129-003926'", "'run-20261129-003931'"))[0] == "timestamp"
    # A dict keyed by frozensets of str: its keys pickle in hash-seed order, its values do not move.
    keyed = [
        _node(
            "", f"k{i}", [_node("[frozenset({'new', 'york'})]", "v", t="str")], t="dict", s="dict of 1", o="o"
        )
        for i in range(2)
    ]
    kind, hint = hint_for(keyed)
    assert kind == "set-order" and "keyed by frozensets" in hint
    # An object's repr is not what is hashed: an address in it is no reason.
    assert (
        hint_for(runs("Cfg", "<Cfg object at 0x7f9061e72190>", "<Cfg object at 0x7f16c67795d0>"))[0]
        == "value"
    )


TREES_SCRIPT = textwrap.dedent(
    """
    import json, sys, types, uuid, time
    from cachetool.fingerprint.tree import build_tree

    LABELS = {"pos", "neg", "neutral", "mixed", "other"}
    CONFIG = types.SimpleNamespace(languages=frozenset(["en", "de", "fr", "it", "es"]), n=3)
    PROMPT = "Answer with one of: " + ", ".join(LABELS)

    def make():
        stop = frozenset(["the", "a", "an", "of", "to", "in", "on"])
        return lambda ex: [w for w in ex if w not in stop]

    class Labeler:
        def __init__(self, labels):
            self.label2id = {label: i for i, label in enumerate(labels)}
            self.tags = set(labels)
        def __call__(self, ex):
            return self.label2id[ex]

    def uses_config(ex):
        return ex in CONFIG.languages

    def uses_prompt(ex):
        return PROMPT + ex

    def tag(ex, run_id=str(uuid.uuid4())):
        return ex

    def stable(ex, k=3):
        return ex in ("a", "b") and ex in LABELS

    objs = {
        "literal": lambda ex: ex in {"pos", "neg", "mixed", "unknown", "other"},
        "closure": make(),
        "method": Labeler(LABELS).__call__,
        "global": uses_config,
        "prompt": uses_prompt,
        "default": tag,
        "fn_kwargs": {"seed": int(time.time() * 1e6) % 100000, "n": 2},
        "stable": stable,
        "set attribute": Labeler(["x", "y"]).__call__,
    }
    trees = {k: build_tree(v) for k, v in objs.items()}
    json.dump({"datasets": "datasets" in sys.modules, "trees": trees}, sys.stdout)
    """
)


@pytest.fixture(scope="module")
def two_process_trees(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    script = tmp_path_factory.mktemp("trees") / "make_trees.py"
    script.write_text(TREES_SCRIPT)
    out = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["datasets"] is False  # the replica pickler made these digests
        out.append(doc["trees"])
    return out


EXPECTED_CULPRITS = {
    "literal": ("literal → code → const[1] (frozenset of 5 str)", "set-order"),
    "closure": ("closure → closure 'stop' (frozenset of 7 str)", "set-order"),
    "method": ("method → __self__ → .label2id (dict of 5)", "order"),
    "global": ("global → global 'CONFIG' → .languages (frozenset of 5 str)", "set-order"),
    "prompt": ("prompt → global 'PROMPT' (str of 51)", "order"),
    "default": ("default → default 'run_id' (str of 36)", "uuid"),
    "fn_kwargs": ("fn_kwargs['seed'] (int)", "value"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED_CULPRITS))
def test_trees_from_two_processes_name_the_culprit(
    two_process_trees: list[dict[str, Any]], name: str
) -> None:
    """Trees built in two interpreters with different hash seeds diff to the expected part."""
    culprit = diff_trees(name, [run[name] for run in two_process_trees])
    assert culprit is not None
    path, kind = EXPECTED_CULPRITS[name]
    assert culprit.path_str == path
    assert culprit.kind == kind


@pytest.mark.slow
@pytest.mark.parametrize("name", ["stable", "set attribute"])
def test_deterministic_objects_have_equal_trees_across_processes(
    two_process_trees: list[dict[str, Any]], name: str
) -> None:
    """A tuple literal and a runtime set attribute (datasets sorts sets) do not differ."""
    assert diff_trees(name, [run[name] for run in two_process_trees]) is None


def test_unpicklable_tree_in_json_still_names_the_piece(tmp_path: Path) -> None:
    gen = (i for i in range(2))
    tree = json.loads(json.dumps(build_tree({"ids": gen, "ok": 1})))
    piece = find_unpicklable("fn_kwargs", tree)
    assert piece is not None and piece.path_str == "fn_kwargs['ids'] (generator)"


def test_several_places_are_grouped_under_what_explains_them() -> None:
    """Differences below a plain object are listed per place; a reordered list is one place."""

    def run(order: tuple[str, str], stamp: str) -> dict[str, Any]:
        items = [_node(f"[{i}]", f"i{w}", t="str", s="str of 1", r=repr(w)) for i, w in enumerate(order)]
        names = _node(
            ".names", "n" + "".join(order), items, t="list", s="list of 2 str", r=repr(list(order)), o="o"
        )
        made = _node(".made", stamp, t="float", s="float", r=stamp)
        return _node("", "root" + stamp, [names, made], t="Config", s="Config", r="<Config>")

    culprit = diff_trees("fn_kwargs", [run(("a", "b"), "1795306683.42"), run(("b", "a"), "1795306690.17")])
    assert culprit is not None and culprit.path == ()
    assert [(p.path_str, p.kind) for p in culprit.parts] == [
        ("fn_kwargs → .names (list of 2 str)", "order"),
        ("fn_kwargs → .made (float)", "timestamp"),
    ]


def test_one_object_reached_by_several_paths_is_one_place() -> None:
    """A frozenset constant reached twice (a dataclass field's default factory, and the same
    function as a closure of the class's ``__init__``): the culprit is that one object, named by
    its shortest path, not the object holding both paths; a public name before a private one."""

    def run(i: int) -> dict[str, Any]:
        def const() -> dict[str, Any]:
            return _node("const[1]", f"fs{i}", t="frozenset", s="frozenset of 6 str", r="frozenset({...})")

        def factory(label: str) -> dict[str, Any]:
            return _node(label, f"fn{i}", [_node("code", f"co{i}", [const()], t="code")], t="function")

        field_ = _node("['vocab']", f"fd{i}", [factory(".default_factory")], t="Field")
        fields_ = _node(".__dataclass_fields__", f"fs{i}d", [field_], t="dict")
        init = _node(".__init__", f"in{i}", [factory("closure '_dflt_vocab'")], t="function")
        cls = _node("class", f"cl{i}", [fields_, init], t="type")
        return _node("", f"root{i}", [_node(".cfg", f"cfg{i}", [cls], t="Cfg")], t="Tagger")

    culprit = diff_trees("function", [run(1), run(2)])
    assert culprit is not None
    assert culprit.path_str == (
        "function → .cfg → class → .__init__ → closure '_dflt_vocab' → code → const[1] (frozenset of 6 str)"
    )
    assert culprit.kind == "set-order" and culprit.parts == ()

    # Two attributes holding one list (ClassLabel's `._int2str` is its `.names`): the public one.
    def label(i: int) -> dict[str, Any]:
        names = [_node(name, f"n{i}", t="list", s="list of 4 str", o="o") for name in ("._int2str", ".names")]
        return _node("", f"cl{i}", names, t="datasets.ClassLabel")

    same = diff_trees("feature", [label(1), label(2)])
    assert same is not None and (same.path_str, same.kind) == ("feature → .names (list of 4 str)", "order")


def test_a_plain_value_inside_what_explains_it_is_named_by_that() -> None:
    """The int inside a `uuid.UUID` on an object is named as the UUID (a uuid made at run time),
    and an int that reads as a memory address in each run (``id(obj)``) as an address."""

    def run(number: str) -> dict[str, Any]:
        inner = _node(".int", f"i{number}", r=number)
        made = _node(".run_id", f"u{number}", [inner], t="UUID", s="UUID", r=f"UUID('{number}')")
        key = _node(".key", f"k{number}", r=str(139990131606352 + int(number[-2:]) * 16))
        return _node("", f"r{number}", [made, key], t="Run", s="Run", r="<Run>")

    culprit = diff_trees("function", [run("264958461563023097757571921561669715710"), run("12")])
    assert culprit is not None
    assert [(p.path_str, p.kind) for p in culprit.parts] == [
        ("function → .run_id (UUID)", "uuid"),
        ("function → .key (int)", "address"),
    ]
    uuid_only = [_node("", f"r{n}", [node_at(run(n), (".run_id",))], t="Run") for n in ("10", "12")]
    alone = diff_trees("function", uuid_only)
    assert alone is not None and (alone.path_str, alone.kind) == ("function → .run_id (UUID)", "uuid")
    assert hint_for([_node("", "a", r="4187"), _node("", "b", r="912")])[0] == "value"
