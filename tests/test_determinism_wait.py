"""check-determinism waits for a run as `Popen.wait` does: the exit status, or a timeout."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from cachetool.determinism.process import wait_exit


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.mark.slow
@pytest.mark.parametrize("code, status", [("raise SystemExit(3)", 3), ("pass", 0)])
def test_a_run_that_ends_gives_its_exit_status(code: str, status: int) -> None:
    """The status a run's report shows is the one `Popen.wait` gives (a timeout that does not
    expire changes nothing)."""
    proc = _child(code)
    assert wait_exit(proc, 60.0) == status
    assert proc.returncode == status
    assert wait_exit(proc, 60.0) == status  # already reaped: asked again, the same answer


@pytest.mark.slow
def test_a_run_past_its_timeout_raises_timeout_expired_and_keeps_running() -> None:
    """`--timeout`: the wait gives up with `TimeoutExpired` (the runner then stops the run); the
    process is left as it was, and a killed run reports the signal as a negative status."""
    proc = _child("import time; time.sleep(60)")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exit(proc, 0.2)
        assert proc.poll() is None
    finally:
        proc.kill()
    assert wait_exit(proc, 60.0) == -signal.SIGKILL
