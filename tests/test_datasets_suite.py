"""`tests/datasets_suite/run_compare.py` (datasets' own tests, traced and plain) never passes
without testing: a test file that does not load, or a run where no test ran, fails it, and it
says how many tests it compared. Checked on a small stand-in for the `datasets` repository."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "datasets_suite" / "run_compare.py"

#: The stand-in repository's revisions: test files by name (the others of run_compare's list
#: are missing there, which it says and does not count as a failure).
REVISIONS = {
    "broken": {
        "tests/test_fingerprint.py": "import a_module_that_is_not_installed\n\ndef test_a():\n    pass\n",
        "tests/test_arrow_dataset.py": "def test_one():\n    pass\n",
    },
    "skipped": {
        "tests/test_arrow_dataset.py": "import pytest\n\n@pytest.mark.skip\ndef test_one():\n    pass\n",
    },
    "good": {
        "tests/test_fingerprint.py": "def test_a():\n    pass\n",
        "tests/test_arrow_dataset.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
    },
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with one tag per entry of `REVISIONS`."""
    repo = tmp_path_factory.mktemp("datasets-repo")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)

    git("init", "-q")
    for tag, files in REVISIONS.items():
        for old in (repo / "tests").glob("test_*.py"):
            old.unlink()
        for name, text in {"tests/__init__.py": "", "tests/conftest.py": "", **files}.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text, encoding="utf-8")
        git("add", "-A")
        git("commit", "-q", "-m", tag)
        git("tag", tag)
    return repo


@dataclass(frozen=True)
class Compared:
    """What `run_compare.py REPO --rev REV` gave: its exit code and its stdout."""

    returncode: int
    stdout: str


@pytest.fixture
def compare(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[Path, str], Compared]:
    """`run_compare.py REPO --rev REV` as its `main` (in this process: the script's two pytest
    runs are processes of their own, and import this checkout's cachetool)."""
    monkeypatch.setenv("PYTHONPATH", str(SCRIPT.parents[2]))
    spec = importlib.util.spec_from_file_location("run_compare", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def run(repo: Path, rev: str) -> Compared:
        capsys.readouterr()
        code = module.main([str(repo), "--rev", rev])
        return Compared(code, capsys.readouterr().out)

    return run


def test_a_test_file_that_does_not_load_fails_the_comparison(
    repo: Path, compare: Callable[[Path, str], Compared]
) -> None:
    """One of the test files imports a module that is not installed: the comparison names it
    and exits 2, though the test that loaded has the same outcome traced and plain."""
    proc = compare(repo, "broken")
    assert proc.returncode == 2, proc.stdout
    lines = proc.stdout.splitlines()
    assert (
        "NOT LOADED tests/test_fingerprint.py: not loaded "
        "(ModuleNotFoundError: No module named 'a_module_that_is_not_installed')"
    ) in lines
    summary = (
        "1 tests compared (1 passed without tracing); 0 differ with tracing on; 1 test file(s) did not load"
    )
    assert summary in lines
    assert "not compared: tests/test_builder.py is not in the repository at broken" in lines


def test_nothing_compared_fails_and_a_real_comparison_says_how_many(
    repo: Path, compare: Callable[[Path, str], Compared]
) -> None:
    """Only a skipped test: nothing was compared, exit 2. Three passing tests, traced and plain:
    "3 tests compared", exit 0."""
    skipped = compare(repo, "skipped")
    assert skipped.returncode == 2, skipped.stdout
    assert "FAILED: nothing was compared (no test ran in both passes)" in skipped.stdout.splitlines()
    good = compare(repo, "good")
    assert good.returncode == 0, good.stdout
    summary = (
        "3 tests compared (3 passed without tracing); 0 differ with tracing on; 0 test file(s) did not load"
    )
    assert summary in good.stdout.splitlines()
