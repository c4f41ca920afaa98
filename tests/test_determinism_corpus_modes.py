"""Corpus cases written from the mechanism of real reports (each script's docstring says which),
checked as one pipeline in the three ways users run check-determinism: `--isolated` (fresh caches,
one after another), the default (the user's cache, a cold first run) and a warm repeat of the
default on the cache the first check left. Every culprit is named at its leaf with its kind, every
control is deterministic, in all three."""

from __future__ import annotations

import os

import pytest

from cachetool.determinism.verdict import DeterminismReport, cause_lines, human_lines
from cachetool.errors import ExitCode
from tests.corpus_pipeline import causes_of, shared_reports

pytestmark = pytest.mark.slow

#: script -> (cause kind, operation of the step, argument, a part of the leaf's path, leaf kind).
#: Leaf kinds as the check names them without its equal-seed rerun (which turns an "order" or
#: "value" it reproduces into "hash-seed").
CULPRITS: dict[str, tuple[str, str, str | None, str, str]] = {
    "s01_data_files_from_set.py": ("source", "load_dataset", None, "data_files order", ""),
    "s02_gen_kwargs_from_set.py": ("source", "from_generator", "gen_kwargs", "['paths']", "order"),
    "s03_concatenate_over_set.py": ("source", "concatenate_datasets", None, "inputs order", ""),
    "s04_data_files_split_from_set.py": ("source", "load_dataset", None, "data_files order", ""),
    "c21_vocab_from_set.py": ("arguments", "map", "function", "global 'vocab'", "order"),
    "c22_nested_config_frozenset.py": ("arguments", "map", "function", ".options → .stop", "set-order"),
    "c23_labels_fn_kwargs_from_set.py": ("arguments", "map", "fn_kwargs", "['names']", "order"),
    "c24_pid_in_closure.py": ("arguments", "map", "function", "global 'worker'", "value"),
    "c25_dictdict_map_frozenset.py": ("arguments", "map", "function", "global 'stop'", "set-order"),
    "c26_cached_property_vocab.py": ("cache-state", "map", "function", ".vocab", "cache-state"),
    "c27_sorted_set_literal_in_method.py": ("arguments", "map", "function", "code → const[1]", "set-order"),
}
CONTROLS = [
    "k16_data_files_sorted.py",
    "k17_gen_kwargs_sorted.py",
    "k18_concatenate_sorted.py",
    "k19_data_files_split_sorted.py",
    "k21_vocab_sorted.py",
    "k22_nested_config_tuple.py",
    "k23_select_from_int_set.py",
    "k24_hostname_in_closure.py",
    "k25_dictdict_filter_map.py",
    "k26_cached_property_warmed.py",
    "k27_cache_file_name_fixed.py",
]
#: script -> (operation, the argument naming its file, the file's name) of each step whose file
#: name differs, in order (train_test_split's test indices belong to its train indices' cause, a
#: source's test split to its train split's).
NAMED: dict[str, list[tuple[str, str, str]]] = {
    "n01_cache_file_name_per_run.py": [
        ("load_dataset", "cache_dir", "tmp"),
        ("map", "cache_file_name", "lengths.arrow"),
        ("shuffle", "indices_cache_file_name", "order.arrow"),
        ("sort", "indices_cache_file_name", "by_text.arrow"),
        ("select", "indices_cache_file_name", "picked.arrow"),
        ("train_test_split", "train_indices_cache_file_name", "train.arrow"),
        ("map", "cache_file_name", "words-"),
    ],
}
SCRIPTS = [*CULPRITS, *NAMED, *CONTROLS]
MODES = ("isolated", "default", "warm")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[str], DeterminismReport]]:
    """The pipeline of every case, checked in each mode (once per session, in the pipelines of
    tests/corpus_pipeline.py `shared_reports`, with the scripts other files check in that mode):
    the scripts checked and the report."""
    _, isolated, (report,) = shared_reports(tmp_path_factory, "isolated")
    _, default, (first, again) = shared_reports(tmp_path_factory, "default")
    return {"isolated": (isolated, report), "default": (default, first), "warm": (default, again)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("script", sorted(CULPRITS))
def test_each_culprit_is_named_at_its_leaf(
    script: str, mode: str, reports: dict[str, tuple[list[str], DeterminismReport]]
) -> None:
    """One cause per case, at the step that makes it, of the kind its mechanism is, naming the
    part to fix (a source's reordered inputs, the leaf of an argument) with the kind of that part."""
    checked, report = reports[mode]
    causes = causes_of(script, report, checked)
    assert len(causes) == 1, "\n".join(human_lines(report))
    (cause,) = causes
    kind, operation, argument, where, leaf = CULPRITS[script]
    lines = "\n".join(cause_lines(cause))
    assert (cause.kind, cause.step.operation) == (kind, operation), lines
    assert "rewritten" not in lines, lines
    if argument is None:
        assert where in [d.key for d in cause.source_diffs], lines
        return
    parts = [(p.path_str, p.kind) for c in cause.culprits for p in (c.parts or (c,))]
    assert any(argument in path and where in path and k == leaf for path, k in parts), (parts, lines)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("script", sorted(NAMED))
def test_a_cache_file_named_anew_in_each_run_is_not_deterministic(
    script: str, mode: str, reports: dict[str, tuple[list[str], DeterminismReport]]
) -> None:
    """A step whose `cache_file_name` (or indices file) is in a new temporary folder, or has the
    time in its name, has the same fingerprint in every run, but no rerun finds its file: a cause
    at that step, naming the argument and the paths, with a hint (k27, the same with fixed paths,
    is a control)."""
    checked, report = reports[mode]
    causes = causes_of(script, report, checked)
    text = "\n".join(line for cause in causes for line in cause_lines(cause))
    assert [(c.kind, c.step.operation) for c in causes] == [
        ("file-name", op) for op, _, _ in NAMED[script]
    ], text
    for cause, (_, argument, name) in zip(causes, NAMED[script], strict=True):
        assert len(set(cause.step.results)) == 1, text  # the fingerprint is the same
        (diff,) = [d for d in cause.file_names if d.key == argument]
        assert len(set(diff.values)) == len(diff.values) == len(report.runs), text
        assert all(os.path.basename(v).startswith(name) for v in diff.values), text
        assert f"  {argument}: {' vs '.join(diff.values)}" in cause_lines(cause), text
    assert "hint: name the file by a fixed path" in text, text
    assert report.exit_code == ExitCode.PROBLEMS_FOUND


@pytest.mark.parametrize("mode", MODES)
def test_controls_are_deterministic(
    mode: str, reports: dict[str, tuple[list[str], DeterminismReport]]
) -> None:
    """The same pipelines made deterministic (sorted, a tuple, a module-level constant, a warmed
    cached property, ints in a set, the host name): no cause in any mode."""
    checked, report = reports[mode]
    for script in CONTROLS:
        assert not causes_of(script, report, checked), (script, "\n".join(human_lines(report)))
