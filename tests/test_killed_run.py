"""A pipeline killed in the middle of a long `map`: `explain --last` says the run was killed, names
the step that was running and what it had written. (It said "Nothing was recomputed" or "first
time this step ran": the killed step left no record at all.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

# Line 12 is the long map; its function says when it is well under way (a few written batches).
PIPELINE = textwrap.dedent(
    """\
    import sys, time
    from pathlib import Path
    from datasets import load_dataset

    def slow(ex, idx):
        if idx == 300:
            Path(sys.argv[2]).write_text("busy")
        time.sleep(0.002 if idx >= 300 else 0)
        return {"y": ex["x"] * 2}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    ds = ds.map(slow, with_indices=True, writer_batch_size=50)
    print("finished")
    """
)


def _cli(tmp_path: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _run_and_kill(tmp_path: Path, env: dict[str, str]) -> int:
    """`cachetool run p.py` (the process becomes the script's), SIGKILLed once the map is busy."""
    marker = tmp_path / "busy"
    marker.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cachetool", "run", "p.py", "d.csv", str(marker)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the map never got under way"
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert b"finished" not in out
    return proc.pid


def _explained(tmp_path: Path, env: dict[str, str], pid: int, before: set[Path]) -> set[Path]:
    """What `explain --last` says of the run just killed; returns the unfinished files it names."""
    human = _cli(tmp_path, env, "explain", "--last")
    assert "Nothing was recomputed" not in human, human
    assert "first time this step ran" not in human, human
    assert "killed" in human and f"process {pid}" in human, human
    assert "map" in human and "p.py:12" in human, human
    new = {p for p in (tmp_path / "cache").rglob("tmp*") if p.is_file()} - before
    assert new, "datasets left no unfinished file"
    assert all(p.name in human for p in new), human
    assert not any(p.name in human for p in before), human

    doc = json.loads(_cli(tmp_path, env, "explain", "--last", "--json"))
    interrupted = doc["interrupted"]
    assert interrupted["state"] == "killed" and interrupted["pid"] == pid
    assert interrupted["step"]["operation"] == "map"
    assert interrupted["step"]["call_site"]["line"] == 12
    written = {Path(w["path"]): w["size"] for w in interrupted["written"]}
    assert set(written) == new and all(size > 0 for size in written.values()), written
    return new


def test_explain_last_says_the_run_was_killed_in_the_map_and_what_it_wrote(tmp_path: Path) -> None:
    """SIGKILL the script while its map is writing, twice: `explain --last` says the run was
    killed (the process named), names the map at p.py:12 that was running, and lists the
    unfinished file that run had written, with its size. It said "first time this step ran" (of
    the CSV load) after the first kill and "Nothing was recomputed" after the second (the load
    was then a cache hit). The JSON document carries the same facts."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    first = _explained(tmp_path, env, _run_and_kill(tmp_path, env), set())
    _explained(tmp_path, env, _run_and_kill(tmp_path, env), first)
