"""The processes of one run: its output drained to a capped tail, and every process it started
found and stopped (through a marker in their environment) however it detached."""

from __future__ import annotations

import contextlib
import math
import os
import re
import select
import signal
import subprocess
import threading
import time
from pathlib import Path

__all__ = [
    "OUTPUT_CAP",
    "RUN_MARKER_ENV",
    "Tail",
    "kill_group",
    "marked_pids",
    "stop_marked",
    "tail_lines",
    "terminal_lines",
    "wait_exit",
]

_STDERR_TAIL_LINES = 20
#: Bytes of a run's stdout and stderr kept (the last ones, on disk in its run folder): a script
#: that prints gigabytes must not fill the temp dir.
OUTPUT_CAP = 1 << 20
#: Marks every process of one run (inherited through fork, exec and setsid), so the processes a
#: run leaves behind can be found and stopped even when they left its process group.
RUN_MARKER_ENV = "CACHETOOL_CHECK_RUN"


class Tail:
    """Drains a pipe on a thread, keeping only its last `cap` bytes (and the total count)."""

    def __init__(self, fd: int, cap: int = OUTPUT_CAP) -> None:
        self.fd = fd
        self.cap = cap
        self.total = 0
        self.buf = bytearray()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            self.total += len(chunk)
            self.buf += chunk
            if len(self.buf) > 2 * self.cap:
                del self.buf[: len(self.buf) - self.cap]

    def finish(self, path: Path, timeout: float = 2.0) -> bytes:
        """Wait for the end of the stream (a process that outlived the run may hold the pipe:
        then give up after `timeout`), write the kept tail to `path` and return it."""
        self.thread.join(timeout)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.thread.join(1.0)
        data = bytes(self.buf[-self.cap :])
        with contextlib.suppress(OSError):
            path.write_bytes(data)
        return data


def tail_lines(data: bytes, lines: int = _STDERR_TAIL_LINES) -> str:
    """The script's last real lines, as its terminal showed them (no progress-bar redraws)."""
    return "\n".join(terminal_lines(data.decode(errors="replace"))[-lines:])


def marked_pids(marker: str) -> list[int]:
    """Pids of live processes (of this user, readable in /proc) whose environment holds the run
    marker `marker`: what a run started, however it detached (double fork, setsid)."""
    needle = f"{RUN_MARKER_ENV}={marker}".encode() + b"\0"
    me = os.getpid()
    out: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:  # pragma: no cover - no /proc: only the process group is stopped
        return out
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if b"\0" + needle in b"\0" + env + b"\0":  # a whole variable, not the tail of another
            out.append(int(name))
    return out


def stop_marked(marker: str, rounds: int = 5) -> int:
    """SIGKILL every process carrying `marker`, again until none is left (one may fork while
    the others are stopped). Returns how many were stopped."""
    stopped: set[int] = set()
    for _ in range(rounds):
        pids = [p for p in marked_pids(marker) if not _is_zombie(p)]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                stopped.add(pid)
        time.sleep(0.05)
    return len(stopped)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True


_PROGRESS_BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\|\s*\d+/\d+ \[|[0-9.?]+ ?(it|examples|ba|B)/s\]")


def terminal_lines(text: str) -> list[str]:
    """The lines of a script's stderr as a terminal last showed them: each line is what follows
    its last carriage return (a progress bar redraws itself with ``\\r``), and progress-bar lines
    (``Map: 100%|████| 4/4 [00:00<00:00, 248 examples/s]``) are left out."""
    out = []
    for raw in text.split("\n"):
        line = raw.rstrip("\r").rsplit("\r", 1)[-1]
        if line.strip() and not _PROGRESS_BAR.search(line):
            out.append(line)
    return out


def wait_exit(proc: subprocess.Popen[bytes], timeout: float | None) -> int:
    """`proc.wait(timeout)`, woken by the exit itself: with a timeout, `Popen.wait` sleeps in
    steps of up to 50 ms and sees the end of a run that much late; a pidfd (Linux 5.3+) becomes
    readable the moment the process exits. Raises `subprocess.TimeoutExpired` as `wait` does."""
    if timeout is None or proc.returncode is not None:
        return proc.wait(timeout)
    try:
        fd = os.pidfd_open(proc.pid)  # not yet reaped (no returncode): the pid is still ours
    except (AttributeError, OSError):  # another OS, an old kernel
        return proc.wait(timeout)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(max(0, math.ceil(timeout * 1000))):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    return proc.wait()


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the run and anything it started (a num_proc pool): it runs in its own session."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()
