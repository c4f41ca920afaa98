"""What the commands say of a cache that other processes write at the same time is true: a file
still being written is never offered for removal as a dead run's leftover. Real runs, real
SIGKILLs (tests/test_killed_run.py's pipeline and helpers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import invoke
from tests.test_killed_run import PIPELINE, _no_orphans, _run_and_kill, subprocess_env

pytestmark = pytest.mark.slow
__all__ = ["_no_orphans"]  # the fixture that kills the orphaned pool workers after each test


def test_explain_says_the_orphaned_workers_of_a_killed_run_still_write(tmp_path: Path) -> None:
    """A `num_proc=2` map SIGKILLed while its pool workers write their shards: the workers keep
    writing. `explain --last` says so, with their pids, and offers no `gc --temp` command to
    remove those files (gc keeps them: they are in use). It listed them as the killed run's
    "partial output" with the command to remove them, as if nothing wrote them any more."""
    (tmp_path / "p.py").write_text(
        PIPELINE.replace("writer_batch_size=50)", "writer_batch_size=50, num_proc=2)"), encoding="utf-8"
    )
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(40000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    pid = _run_and_kill(tmp_path, env)
    human = invoke("explain", "--last", env=env, columns=200).stdout
    assert f"killed (process {pid} " in human, human
    written = sorted(p.name for p in (tmp_path / "cache").rglob("tmp*") if p.is_file())
    assert written, "the workers wrote no unfinished file"
    assert "still writing" in human, human
    assert all(name in human for name in written), human
    assert "gc --temp" not in human, human
    assert "partial output" not in human, human
    # What gc says of them agrees: in use, kept.
    gc = invoke(
        "gc", "--temp", "--min-age", "0", "--dry-run", "--cache-dir", str(tmp_path / "cache"), env=env
    )
    assert "in use by pid" in gc.stdout, gc.stdout
