"""Run a piece of `datasets` work in a child process and SIGKILL it mid-write: what a crash,
an OOM kill or `kill -9` leaves behind is what the builders want on disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit("timed out waiting for a writer")


def killed_run(code: str, *args: str, ready: Callable[[], bool], settle: float = 0.2, **env: str) -> None:
    """Run `code` in a child and SIGKILL it as soon as `ready()` says it is mid-write (after
    `settle` seconds more, so the writer is well inside what it writes)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: ready() or proc.poll() is not None)
        time.sleep(settle)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def killed_fork(code: str, *args: str, ready: Callable[[], bool], settle: float = 0.2) -> None:
    """`killed_run` in a child forked from this process, for a builder that has imported
    `datasets` already: the child starts without a new interpreter's imports (0.8 s of CPU), runs
    `code` as `python -c code ARGS` would (in a `__main__` namespace of its own, its output
    discarded) under this process's environment, and is SIGKILLed as `killed_run`'s is. Only for a
    builder (one thread, nothing of its own in flight), never from the tests' process."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: ends here whatever happens
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            sys.argv = ["-c", *args]
            exec(compile(code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        finally:
            os._exit(0)
    ended = False

    def gone() -> bool:
        nonlocal ended
        ended = ended or os.waitpid(pid, os.WNOHANG) != (0, 0)
        return ended

    try:
        wait_for(lambda: ready() or gone())
        time.sleep(settle)
    finally:
        if not ended:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
