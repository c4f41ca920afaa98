"""A step `datasets` cannot hash gets a "random" fingerprint. Before datasets 2.17 it comes from
Python's global `random` (`random.getrandbits(64)`), so after `random.seed(42)` (transformers'
`set_seed`) every run gets the same one, and an edited step loads the result of the old code.
From 2.17 on the fallback has a generator of its own and is new in every run.

Runs on whichever `datasets` is installed: in the main suite (5.2: never flagged) and in every
`nox -s compat` session (2.14: flagged)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import cachetool_run, hf_env

pytestmark = pytest.mark.slow

#: The release lines whose fallback fingerprint repeats after `random.seed`.
PREDICTABLE = tuple(int(p) for p in version("datasets").split(".")[:2]) < (2, 17)

SCRIPT = """\
import random
from datasets import load_dataset

random.seed(42)  # what transformers' set_seed does
numbers = (i for i in range(3))  # a generator: datasets cannot hash a function that uses it


def scale(ex):
    _ = numbers
    return {"y": ex["id"] * 2}


ds = load_dataset("csv", data_files="data.csv", split="train")
print(list(ds.map(scale)["y"]))
"""


@dataclass(frozen=True)
class Runs:
    base: Path
    env: dict[str, str]
    first: subprocess.CompletedProcess[str]
    second: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The script run under `cachetool run`, edited (`* 2` -> `* 3`), and run again."""
    base = tmp_path_factory.mktemp("seeded")
    (base / "data.csv").write_text("id\n1\n2\n3\n", encoding="utf-8")
    script = base / "pipe.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = hf_env(base, COLUMNS="300")
    first = cachetool_run("pipe.py", env=env, cwd=base)
    script.write_text(SCRIPT.replace("* 2", "* 3"), encoding="utf-8")
    second = cachetool_run("pipe.py", env=env, cwd=base)
    return Runs(base, env, first, second)


def cachetool(runs: Runs, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cachetool", *args],
        env=runs.env,
        cwd=runs.base,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_edited_step_loads_the_old_result_only_where_the_fallback_is_predictable(runs: Runs) -> None:
    """The fact the rest is about: on datasets < 2.17 the edited step loads what the old code
    computed; on later releases it computes anew."""
    assert runs.first.stdout.split("\n")[-2] == "[2, 4, 6]"
    assert runs.second.stdout.split("\n")[-2] == ("[2, 4, 6]" if PREDICTABLE else "[3, 6, 9]")


def test_a_traced_run_warns_about_a_predictable_fallback(runs: Runs) -> None:
    """The run warns, naming the step's call site, the part that cannot be hashed and that the
    fingerprint repeats after `random.seed`; the second run says it loaded a probably stale result."""
    for proc in (runs.first, runs.second):
        warning = next((line for line in proc.stderr.splitlines() if "random.seed" in line), None)
        if not PREDICTABLE:
            assert warning is None, proc.stderr
            continue
        assert warning is not None, proc.stderr
        assert warning.startswith("cachetool: warning: map scale @ pipe.py:14: ")
        assert "`function → global 'numbers'` (generator) cannot be hashed" in warning
        assert "repeats across runs after random.seed(...)" in warning
        assert "new_fingerprint=" in warning
    if PREDICTABLE:
        assert "probably stale" not in runs.first.stderr
        assert "loaded cache-1c80317fa3b1799d.arrow: probably stale" in runs.second.stderr


def test_explain_marks_the_hit_probably_stale(runs: Runs) -> None:
    """`explain --last` marks the reuse of the predictable fingerprint as probably stale (exit 1,
    as for every stale hit)."""
    proc = cachetool(runs, "explain", "--last")
    assert proc.returncode == (1 if PREDICTABLE else 0), proc.stderr
    said = "probably stale: the fingerprint is predictable, not derived from the function"
    assert (said in proc.stdout) == PREDICTABLE, proc.stdout
    stale = json.loads(cachetool(runs, "explain", "--last", "--json").stdout)["stale"]
    assert [s["fingerprint"] for s in stale] == (["1c80317fa3b1799d"] if PREDICTABLE else [])


def test_check_determinism_fails_a_predictable_fallback(runs: Runs) -> None:
    """check-determinism exits 1 with a hint where the fallback repeats in every run; where it
    is random, it exits 3 (a random fingerprint) as before."""
    proc = cachetool(runs, "check-determinism", "pipe.py")
    assert proc.returncode == (1 if PREDICTABLE else 3), proc.stdout + proc.stderr
    assert ("repeats across runs after random.seed(...)" in proc.stdout) == PREDICTABLE, proc.stdout
    if PREDICTABLE:
        assert "new_fingerprint=" in proc.stdout
