"""`verify --quarantine` moves only the file it found broken: a good file swapped in after the
check stays where it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cachetool.maintenance.verify import verify_cache
from cachetool.maintenance.verify.quarantine import plan_quarantine, quarantine
from tests import forks
from tests.attack.races import synthesize_cache
from tests.conftest import hf_env


@pytest.fixture(autouse=True)
def _state_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A quarantine records its moves in the ledger, which notes the root in the user's state."""
    monkeypatch.setenv("CACHETOOL_HOME", str(tmp_path / "cachetool_home"))


def _broken_and_good(root: Path) -> tuple[Path, bytes, bytes]:
    target = synthesize_cache(root, 2)[0]
    good = target.read_bytes()
    bad = good[:-8]  # no end-of-stream marker: an error for verify
    target.write_bytes(bad)
    return target, good, bad


@pytest.mark.parametrize("deep", [False, True], ids=["headers", "deep"])
def test_a_good_file_swapped_in_after_verify_is_not_quarantined(tmp_path: Path, deep: bool) -> None:
    """verify finds a broken file; before the quarantine moves it, a good copy replaces it (a new
    inode, as `datasets` writes one): the good file stays in place and the report says why it was
    not quarantined."""
    root = tmp_path / "cache"
    target, good, _ = _broken_and_good(root)
    report = verify_cache(root, deep=deep)
    assert [f.path for f in report.errors] == [target]
    fresh = tmp_path / "fresh.arrow"
    fresh.write_bytes(good)
    os.replace(fresh, target)
    done = quarantine(report)
    assert done.quarantined == ()
    assert target.read_bytes() == good
    notes = [f.problem for f in done.warnings if f.path == target]
    assert notes and notes[0].startswith("not quarantined: changed since verify read it"), notes


def test_a_file_rewritten_in_place_to_a_good_one_is_not_quarantined(tmp_path: Path) -> None:
    """The same inode made whole again after verify (size and mtime change): left in place."""
    root = tmp_path / "cache"
    target, good, _ = _broken_and_good(root)
    report = verify_cache(root, deep=True)
    time.sleep(0.01)
    target.write_bytes(good)
    assert quarantine(report).quarantined == ()
    assert target.read_bytes() == good


def test_a_file_still_broken_is_quarantined(tmp_path: Path) -> None:
    """Nothing changed since verify: the broken file moves, and only it."""
    root = tmp_path / "cache"
    target, _, bad = _broken_and_good(root)
    done = quarantine(verify_cache(root, deep=True))
    assert [src for src, _ in done.quarantined] == [target]
    assert done.quarantined[0][1].read_bytes() == bad


def test_a_folder_swapped_for_a_symlink_after_the_plan_moves_nothing(tmp_path: Path) -> None:
    """Between `plan_quarantine` and `execute()` the broken file's folder is moved elsewhere and a
    symlink to it takes its name: nothing is moved through the symlink, the file stays where the
    folder went, and the report says why."""
    root = tmp_path / "cache"
    target, _, bad = _broken_and_good(root)
    plan = plan_quarantine(verify_cache(root))
    assert plan.paths == (target,)
    folder = target.parent
    elsewhere = tmp_path / "elsewhere"
    os.rename(folder, elsewhere)
    os.symlink(elsewhere, folder)
    done = plan.execute()
    assert done.quarantined == ()
    assert (elsewhere / target.name).read_bytes() == bad
    notes = [f.problem for f in done.warnings if f.path == target]
    assert notes and notes[0].startswith("not quarantined: "), notes


def test_a_broken_file_a_live_process_holds_open_is_not_quarantined(tmp_path: Path) -> None:
    """A real process holds the broken file open while `execute()` runs: it stays in place,
    reported as in use by that pid; once the process is gone it moves."""
    root = tmp_path / "cache"
    target, _, _ = _broken_and_good(root)
    plan = plan_quarantine(verify_cache(root))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; f = open(sys.argv[1], 'rb'); print('ready', flush=True); sys.stdin.read()",
            str(target),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        done = plan.execute()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert done.quarantined == () and target.is_file()
    assert [f.problem for f in done.warnings if f.path == target] == [
        f"not quarantined: in use by pid {holder.pid}"
    ]
    assert [src for src, _ in plan_quarantine(verify_cache(root)).execute().quarantined] == [target]


SWAPPER = textwrap.dedent(
    """\
    import os, random, sys, time
    target, staging, good, bad = sys.argv[1:5]
    blobs = [open(bad, "rb").read(), open(good, "rb").read()]
    i = 0
    deadline = time.time() + 900
    while time.time() < deadline and not os.path.exists(staging + ".stop"):
        with open(staging, "wb") as f:
            f.write(blobs[i % 2])
        os.replace(staging, target)
        i += 1
        try:  # the longest a version stays: the test raises it when verify is slower than that
            with open(staging + ".hold") as f:
                hold = float(f.read())
        except (OSError, ValueError):
            hold = 1.0
        until = time.time() + random.uniform(0.02, hold)
        while time.time() < until and not os.path.exists(staging + ".stop"):  # ends when told
            time.sleep(0.01)
    """
)


@pytest.mark.slow
def test_quarantine_beside_a_process_swapping_good_and_broken_versions(tmp_path: Path) -> None:
    """A real process replaces a cache file by a broken and a good version in turn while
    `verify --deep --quarantine` runs again and again: every file that lands in quarantine is the
    broken version, never the good one, and at least one lands there."""
    root = tmp_path / "cache"
    target, good, bad = _broken_and_good(root)
    (tmp_path / "good.bin").write_bytes(good)
    (tmp_path / "bad.bin").write_bytes(bad)
    staging = tmp_path / "staging.arrow"
    swapper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SWAPPER,
            str(target),
            str(staging),
            str(tmp_path / "good.bin"),
            str(tmp_path / "bad.bin"),
        ]
    )
    env = hf_env(tmp_path)
    moved: list[bytes] = []
    try:
        # 8 runs (CACHETOOL_QUARANTINE_SOAK=200 for a soak by hand), more while nothing was
        # quarantined: a loaded machine makes verify slow, and the swapper then changes the file
        # before every quarantine (no race to judge), so each such run doubles the longest time a
        # version stays, up to 32 s: swaps still land at random moments of verify's work.
        wanted = int(os.environ.get("CACHETOOL_QUARANTINE_SOAK", "8"))
        runs, hold = 0, 1.0
        while runs < wanted or (not moved and runs < max(30, wanted)):
            runs += 1
            if runs > 1 and not moved and hold < 32:
                hold *= 2
                staging.with_name(staging.name + ".hold").write_text(str(hold))
            proc = forks.run(  # a process of its own, forked warm: the hash seed plays no part
                [*forks.CLI, "verify", "--deep", "--quarantine", "--yes", "--json", "--cache-dir", str(root)],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                preload=("pyarrow",),
            )
            assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
            for q in json.loads(proc.stdout)["quarantined"]:
                moved.append(Path(q["to"]).read_bytes())
    finally:
        staging.with_name(staging.name + ".stop").touch()
        swapper.wait(timeout=60)
    assert moved, "nothing was quarantined: the race did not happen"
    assert all(m == bad for m in moved), f"{sum(m == good for m in moved)} good file(s) quarantined"
