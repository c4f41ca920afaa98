"""gc against real processes that race it: nothing a live process maps is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.attack.races import mapped_files_survive_gc
from tests.conftest import hf_env

pytestmark = pytest.mark.slow


def test_a_file_mapped_while_gc_runs_is_never_deleted(tmp_path: Path) -> None:
    """A reader maps cache hits while `gc --max-size 1 -y` evicts 200 old entries: every file the
    reader holds is still on disk afterwards (gc checks liveness again after taking the file out of
    reach, and puts it back when it became live). One round reaches that window dozens of times;
    more rounds (up to 5) run until it was reached 5 times, and `python -m tests.soak` runs
    hundreds."""
    env = hf_env(tmp_path)
    lost_rounds = []
    put_back: list[str] = []
    rounds = 0
    while rounds == 0 or (len(put_back) < 5 and rounds < 5):
        held, lost = mapped_files_survive_gc(tmp_path / f"cache{rounds}", 200, env, put_back)
        rounds += 1
        assert held, "the reader mapped nothing: the race did not happen"
        if lost:
            lost_rounds.append((len(held), len(lost)))
    print(f"{rounds} round(s): gc put back {len(put_back)} file(s) it found mapped after taking them")
    assert lost_rounds == []
    assert len(put_back) >= 5, "gc never took out a file the reader then mapped: the race did not happen"


def test_a_real_pipeline_beside_a_gc_loop_never_fails(tmp_path: Path) -> None:
    """A `datasets` pipeline (csv load, map, filter, batched map) runs twice on one cache (the
    second run beside what gc left of the first's) while `gc --max-size 1 --min-age 0
    --include-sources -y` runs in a loop beside it: the pipeline never fails and gc never prints a
    traceback (`python -m tests.soak` runs it longer)."""
    from tests.soak import soak_pipeline

    assert soak_pipeline(2, tmp_path) == 0


def test_a_pymp_folder_of_a_live_process_that_holds_nothing_in_it_stays(tmp_path: Path) -> None:
    """A live process called `multiprocessing.util.get_temp_dir()` and holds nothing in the
    folder (no socket, no open file): `gc --temp --min-age 0` keeps it, naming the process; once
    the process is gone, the folder goes."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import short_tmp_dir

    tmp = short_tmp_dir(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    code = (
        "import multiprocessing.util, time\n"
        "print(multiprocessing.util.get_temp_dir(), flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**hf_env(tmp_path), "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    pymp = Path(proc.stdout.readline().strip())
    args = [
        sys.executable,
        "-m",
        "cachetool",
        "gc",
        "--cache-dir",
        str(cache),
        "--temp",
        "--tmp-dir",
        str(tmp),
        "--min-age",
        "0",
        "-y",
        "--json",
    ]
    try:
        doc = json.loads(subprocess.run(args, env=hf_env(tmp_path), capture_output=True, text=True).stdout)
        assert doc["plan"]["items"] == []
        assert [s["reason"] for s in doc["plan"]["skipped"]] == [
            f"a live Python process using this temp dir (pid {proc.pid}) may own it"
        ]
        assert pymp.is_dir()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    doc = json.loads(subprocess.run(args, env=hf_env(tmp_path), capture_output=True, text=True).stdout)
    assert [r["path"] for r in doc["result"]["removed"]] == [str(pymp)], doc["plan"]["skipped"]
    assert not pymp.exists()
