"""Whether a process of this host runs: the one answer every command gives (a zombie has ended);
what tells this host from another (`this_host`)."""

from __future__ import annotations

import os
import socket
from typing import NamedTuple

#: `/proc/<pid>/stat` states of a process that has ended: zombie, dead.
_ENDED = (b"Z", b"X", b"x")


def process_start(pid: int) -> float | None:
    """When process `pid` started (epoch seconds); None when it does not run (gone, or a zombie).
    Read from `/proc` as psutil does, without importing it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2 :].split()
        if fields[0] in _ENDED:
            return None
        return _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    except FileNotFoundError:
        return None
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return float(proc.create_time())
    except (psutil.Error, OSError):
        return None


def alive(pid: int) -> bool:
    """Does process `pid` run on this host (this process does)? A zombie does not; a process
    that `/proc` hides from this user (`hidepid`) but that exists does, as nothing tells."""
    if pid == os.getpid():
        return True
    if process_start(pid) is not None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's, hidden from /proc: it exists
        return not os.path.exists(f"/proc/{pid}")
    return False  # it exists, and /proc says it has ended


def command_line(pid: int, limit: int = 100) -> str:
    """Process `pid`'s command as `ps` shows it (its program's base name, then its arguments,
    shortened to `limit` characters); "" when it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [os.fsdecode(a) for a in f.read().rstrip(b"\0").split(b"\0")]
    except OSError:
        return ""
    if not args or not args[0]:
        return ""
    text = " ".join([os.path.basename(args[0]), *args[1:]])
    text = "".join(c if c.isprintable() else " " for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _boot_time() -> float:
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise ValueError("no btime in /proc/stat")


class HostId(NamedTuple):
    """What tells one host (kernel) and one PID namespace from another (a named tuple: a traced
    run makes this class on its every start, and a dataclass costs eight times as much)."""

    host: str
    boot_id: str
    pid_ns: int


def this_host() -> HostId:
    """This process's host name, kernel boot id and PID namespace."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot_id = f.read().strip()
    except OSError:
        boot_id = ""
    try:
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pid_ns = 0
    return HostId(socket.gethostname(), boot_id, pid_ns)
