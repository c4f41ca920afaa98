"""What a new user sees on ordinary paths: real pipelines in a project folder of their own, run
with `cachetool run`, then the commands (and the hints they print) followed as a user follows
them. Each test is a wrong answer once met there: a false statement, a hint that fails, an exit
code the docs contradict."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import forks

try:  # tests/ may or may not be a package
    from tests.conftest import cachetool_run
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    from conftest import cachetool_run  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

# A helper module of the user's, reached as `helpers.normalize`: dill pickles a module that is
# not installed with everything it holds, so an edit of helpers.py changes the fingerprint.
HELPERS = textwrap.dedent(
    """\
    STOP = {"the", "a"}


    def normalize(s):
        return " ".join(w for w in s.split() if w not in STOP)
    """
)
MODULE_PIPELINE = textwrap.dedent(
    """\
    import os

    from datasets import load_dataset

    import helpers

    here = os.path.dirname(os.path.abspath(__file__))


    def add_len(ex):
        return {"n": len(helpers.normalize(ex["text"]))}


    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    print(ds.map(add_len)._fingerprint)
    """
)


def _project(base: Path, pipeline: str, **files: str) -> tuple[Path, dict[str, str]]:
    project = base / "project"
    project.mkdir()
    rows = "".join(f"{i},the quick fox number {i}\n" for i in range(20))
    (project / "data.csv").write_text("id,text\n" + rows, encoding="utf-8")
    (project / "pipeline.py").write_text(pipeline, encoding="utf-8")
    for name, text in files.items():
        (project / name).write_text(text, encoding="utf-8")
    return project, subprocess_env(base, HF_DATASETS_CACHE=str(base / "cache"), COLUMNS="200")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`cachetool ARGS` as a user runs it, forked from the warm parent (`forks.run`)."""
    return forks.run(
        [sys.executable, "-m", "cachetool", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_an_edited_module_the_function_reads_is_a_change_of_yours_not_a_value_varying_by_itself(
    tmp_path: Path,
) -> None:
    """A map's function calls `helpers.normalize` of the user's module; the user edits a constant
    in helpers.py and runs again: the step is recomputed, and explain says the module differs —
    a change of the user's (it names the value that changed) — never that the module "pickles
    differently in every process", which a rerun without the edit disproves (it hits)."""
    project, env = _project(tmp_path, MODULE_PIPELINE, **{"helpers.py": HELPERS})
    first = cachetool_run(project / "pipeline.py", env=env, cwd=project).stdout.split()[-1]
    (project / "helpers.py").write_text(HELPERS.replace('"a"}', '"a", "quick"}'), encoding="utf-8")
    second = cachetool_run(project / "pipeline.py", env=env, cwd=project).stdout.split()[-1]
    assert first != second

    proc = _cli(env, "explain", "--last", "--json")
    assert proc.returncode == 0, proc.stderr
    steps = json.loads(proc.stdout)["steps"]
    (step,) = [s for s in steps if s["fingerprint"] == second]
    kinds = [r["kind"] for r in step["reasons"]]
    assert kinds == ["argument"], step["reasons"]
    message = step["reasons"][0]["message"]
    assert "function → global 'helpers'" in message
    assert "a change of yours" in message and "STOP" in message, message
    assert "pickles differently in every process" not in message

    third = cachetool_run(project / "pipeline.py", env=env, cwd=project).stdout.split()[-1]
    assert third == second  # the module hashes the same in another process
