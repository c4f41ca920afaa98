"""Which files are in use right now by a live process on this host.

A live `datasets` writer holds its `tmp*` file open (twice: `NamedTemporaryFile` and the Arrow
writer); a live dataset memory-maps its cache files, and maps show up in `/proc/<pid>/maps`, not
in the fd list. One pass over `/proc/*/fd`, `/proc/*/maps` and `/proc/*/cwd` collects them into a
map from (device, inode) to the pids using it. A pass costs as much as there are processes and
open files on the host, so a command makes a fixed number of them, never one per item it judges
(`proc_passes` counts them). Where `/proc` is missing (macOS), psutil's open files are used;
memory maps of other processes are not visible there.

Processes on other machines of a shared file system are invisible to this check; their
writers announce themselves with leases (`cachetool.trace.leases`), and a snapshot taken
for a root carries that root's live ones: `InUse.lease_over(mtime)` is the one answer gc and
verify ask.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from cachetool.trace.leases import CLOCK_SKEW, Lease, judge_leases, this_host

FileKey = tuple[int, int]  # (st_dev, st_ino)


@dataclass(frozen=True)
class InUse:
    """A snapshot of files held open or mapped by live processes."""

    holders: dict[FileKey, frozenset[int]] = field(default_factory=dict)
    writers: dict[FileKey, frozenset[int]] = field(default_factory=dict)  # opened for writing
    complete: bool = True  # False when some processes could not be inspected (permissions)
    # The same holders by path, as /proc names them (fd links and map names): lets a plan be built
    # from a scan's paths without stat'ing every file again. Inodes stay the authority at execute time.
    paths: dict[str, frozenset[int]] = field(default_factory=dict, compare=False)
    #: The live leases of the root this snapshot was taken for (`scan_in_use(root=...)`).
    leases: tuple[Lease, ...] = field(default=(), compare=False)
    #: Working folders of live processes (resolved paths) and the pids in each.
    cwds: dict[str, frozenset[int]] = field(default_factory=dict, compare=False)

    def lease_over(self, mtime: float | None) -> Lease | None:
        """The live lease whose process may have written a file last modified at `mtime`: one
        that started before it (less `CLOCK_SKEW`, hosts' clocks differ). None when no lease
        covers it; an unknown time is covered by any live lease."""
        for lease in self.leases:
            if mtime is None or mtime >= lease.start - CLOCK_SKEW:
                return lease
        return None

    def pids(self, st: os.stat_result) -> frozenset[int]:
        return self.holders.get((st.st_dev, st.st_ino), frozenset())

    def writer_pids(self, st: os.stat_result) -> frozenset[int]:
        return self.writers.get((st.st_dev, st.st_ino), frozenset())

    def pids_for_path(self, path: str | os.PathLike[str]) -> frozenset[int]:
        """Holders of the file at `path` (a resolved path), by name."""
        return self.paths.get(os.fspath(path), frozenset())

    def pids_under(self, folder: str | os.PathLike[str]) -> frozenset[int]:
        """Holders of any file below `folder` (a resolved path), by name."""
        prefix = os.fspath(folder).rstrip("/") + "/"
        return frozenset(pid for p, pids in self.paths.items() if p.startswith(prefix) for pid in pids)

    def cwd_pids_under(self, folder: str | os.PathLike[str]) -> frozenset[int]:
        """Live processes whose working folder is `folder` (a resolved path) or below it."""
        top = os.fspath(folder).rstrip("/")
        return frozenset(
            pid for cwd, pids in self.cwds.items() if cwd == top or cwd.startswith(top + "/") for pid in pids
        )


#: How many passes over every process in `/proc` this process has made.
proc_passes = 0


def pids_text(pids: Iterable[int], limit: int | None = None) -> str:
    """Process ids, sorted, comma-separated; past `limit` of them, the rest is an ellipsis."""
    held = sorted(set(pids))
    return ", ".join(map(str, held[:limit])) + (" …" if limit is not None and len(held) > limit else "")


def _proc_pids() -> Iterable[int]:
    global proc_passes
    proc_passes += 1
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def _dev_from_maps(dev: str) -> int:
    """The device number of a maps line; -1 (no device) if unreadable."""
    try:
        major, minor = dev.split(":")
        return os.makedev(int(major, 16), int(minor, 16))
    except ValueError:
        return -1


def scan_in_use(root: str | os.PathLike[str] | None = None, writers: bool = True) -> InUse:
    """One pass over every process this user may inspect but this one; with `root`, the live leases
    of that cache root too (processes on other hosts, or on this one, that may be writing in it).
    Without `writers`, which descriptors are open for writing is not read (`InUse.writers` stays empty):
    a third of the pass's cost, which gc does not need."""
    snapshot = _scan_local(writers)
    if root is None:
        return snapshot
    import dataclasses

    return dataclasses.replace(snapshot, leases=live_leases(root))


def live_leases(root: str | os.PathLike[str]) -> tuple[Lease, ...]:
    """The live leases of `root` that speak for processes `/proc` cannot show."""
    # A live lease of this host adds nothing to /proc: what its process writes, it holds open
    # (and gc's other rules keep what it writes in bursts). Leases speak for processes /proc
    # cannot show: other hosts, other PID namespaces.
    me = this_host()
    return tuple(lease for lease, state in judge_leases(root) if state == "live" and not lease.is_local(me))


def _scan_local(want_writers: bool) -> InUse:
    if not os.path.isdir("/proc/self/fd"):
        return _scan_psutil()
    holders: dict[FileKey, set[int]] = defaultdict(set)
    writers: dict[FileKey, set[int]] = defaultdict(set)
    paths: dict[str, set[int]] = defaultdict(set)
    cwds: dict[str, set[int]] = defaultdict(set)
    complete = True
    me = os.getpid()
    for pid in _proc_pids():
        if pid == me:
            continue
        fds = _read_fds(pid, holders, writers if want_writers else None, paths)
        if fds == "gone":
            continue  # exited meanwhile
        if fds == "denied" or _read_maps(pid, holders, paths) == "denied":
            complete = False
        try:
            cwds[os.readlink(f"/proc/{pid}/cwd")].add(pid)
        except OSError:
            pass
    return InUse(_frozen(holders), _frozen(writers), complete, _frozen(paths), cwds=_frozen(cwds))


def _frozen(found: dict[_K, set[int]]) -> dict[_K, frozenset[int]]:
    return {k: frozenset(v) for k, v in found.items()}


_K = TypeVar("_K")
_Read = Literal["read", "gone", "denied"]


def _read_fds(
    pid: int,
    holders: dict[FileKey, set[int]],
    writers: dict[FileKey, set[int]] | None,
    paths: dict[str, set[int]],
) -> _Read:
    """Add what process `pid` holds open (and, unless `writers` is None, opened for writing) to
    the maps. Pipes, sockets and other descriptors that name no path are no file of a cache."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except FileNotFoundError:
        return "gone"
    except PermissionError:
        return "denied"
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
            st = os.stat(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if not target.startswith("/"):
            continue
        key = (st.st_dev, st.st_ino)
        holders[key].add(pid)
        paths[target].add(pid)
        if writers is None:
            continue
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as f:
                for line in f:
                    if line.startswith("flags:"):
                        if int(line.split()[1], 8) & (os.O_WRONLY | os.O_RDWR):
                            writers[key].add(pid)
                        break
        except (OSError, ValueError):
            pass
    return "read"


def _mapped(pid: int) -> Iterator[tuple[str, int, str]]:
    """The files process `pid` has memory-mapped: (device as maps writes it, inode, path); raises
    OSError. The device is converted by the caller (`_dev_from_maps`) only where it is needed."""
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[4] != "0" and parts[4].isdigit():
                yield parts[3], int(parts[4]), parts[5].rstrip("\n")


def _read_maps(pid: int, holders: dict[FileKey, set[int]], paths: dict[str, set[int]]) -> _Read:
    """Add the files process `pid` has memory-mapped to the maps."""
    try:
        for dev, ino, name in _mapped(pid):
            holders[(_dev_from_maps(dev), ino)].add(pid)
            if name.startswith("/"):
                paths[name].add(pid)
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
    except PermissionError:
        return "denied"
    return "read"


def pids_holding(keys: Iterable[FileKey]) -> dict[FileKey, frozenset[int]]:
    """Which live processes hold any of these files open or memory-mapped, or have one of these
    folders as their working folder, read from `/proc` now, in one pass for all of them.

    The check gc makes after it took items out of reach: for every process the open
    descriptors are read before its memory maps, so a reader that opened the file before it was
    moved and mapped it since is seen by one or the other."""
    wanted = set(keys)
    found: dict[FileKey, set[int]] = defaultdict(set)
    if not wanted:
        return {}
    if not os.path.isdir("/proc/self/fd"):
        snapshot = _scan_psutil()
        return {k: snapshot.holders[k] for k in wanted if k in snapshot.holders}
    devs = {d for d, _ in wanted}
    inos = {i for _, i in wanted}
    me = os.getpid()
    for pid in _proc_pids():
        if pid == me:
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for link in [*(f"{fd_dir}/{fd}" for fd in fds), f"/proc/{pid}/cwd"]:
            try:
                st = os.stat(link)
            except OSError:
                continue
            if st.st_ino in inos and (st.st_dev, st.st_ino) in wanted:
                found[(st.st_dev, st.st_ino)].add(pid)
        try:
            for maps_dev, ino, _ in _mapped(pid):
                if ino in inos and ((dev := _dev_from_maps(maps_dev), ino) in wanted or dev not in devs):
                    # Some file systems (overlay, btrfs) show another device number in maps than
                    # stat gives: an inode match alone counts, to be safe.
                    found[next(k for k in wanted if k[1] == ino)].add(pid)
        except OSError:
            continue
    return _frozen(found)


def bound_sockets() -> dict[str, int]:
    """Path -> inode of the Unix sockets some live process on this host has bound (`/proc/net/unix`).

    A `pymp-*` folder holds the listener socket of a multiprocess Manager; while its server lives,
    the socket is bound here, even though no process has the socket *file* open."""
    out: dict[str, int] = {}
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="surrogateescape") as f:
            next(f, None)  # header
            for line in f:
                parts = line.split(None, 7)
                if len(parts) == 8 and parts[7].startswith("/"):
                    out[parts[7].rstrip("\n")] = int(parts[6]) if parts[6].isdigit() else 0
    except OSError:
        pass
    return out


def socket_listeners(folder: str | os.PathLike[str]) -> frozenset[int]:
    """Live processes of this host that hold a Unix socket bound below `folder` (the socket's
    inode in `/proc/net/unix`, found among each process's descriptors); empty when none can be
    read (another user's)."""
    prefix = os.fspath(folder).rstrip("/") + "/"
    links = {f"socket:[{ino}]" for path, ino in bound_sockets().items() if path.startswith(prefix) and ino}
    me = os.getpid()
    out: set[int] = set()
    for pid in _proc_pids() if links else ():
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in links:
                    out.add(pid)
                    break
            except OSError:
                continue
    return frozenset(out)


def socket_reason(folder: str | os.PathLike[str]) -> str:
    """Why a folder stays while a live process listens on a socket inside it, naming that
    process (pid and command) when it can be read."""
    from cachetool.processes import command_line

    pids = sorted(socket_listeners(folder))
    if not pids:
        return "a live process listens on a socket inside"
    who = ", ".join(f"pid {pid} ({command_line(pid) or '?'})" for pid in pids[:3])
    return f"a live process listens on a socket inside: {who}{' …' if len(pids) > 3 else ''}"


def _scan_psutil() -> InUse:  # pragma: no cover - platforms without /proc
    import psutil

    holders: dict[FileKey, set[int]] = defaultdict(set)
    writers: dict[FileKey, set[int]] = defaultdict(set)
    paths: dict[str, set[int]] = defaultdict(set)
    cwds: dict[str, set[int]] = defaultdict(set)
    complete = True
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            cwds[proc.cwd()].add(proc.pid)
        except psutil.Error:
            pass
        try:
            files = proc.open_files()
        except (psutil.AccessDenied, psutil.ZombieProcess):
            complete = False
            continue
        except psutil.NoSuchProcess:
            continue
        for of in files:
            try:
                st = os.stat(of.path)
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            holders[key].add(proc.pid)
            paths[of.path].add(proc.pid)
            if "w" in getattr(of, "mode", "") or "a" in getattr(of, "mode", ""):
                writers[key].add(proc.pid)
    return InUse(_frozen(holders), _frozen(writers), complete, _frozen(paths), cwds=_frozen(cwds))


@dataclass(frozen=True)
class TempDirUser:
    """A live process that may keep `hf_datasets-*` folders in a temp dir: pyarrow is loaded (so
    `datasets` may be) and its environment names that temp dir (or cannot be read)."""

    pid: int
    started: float  # seconds since the epoch


def _proc_temp_dir(pid: int) -> str | None:
    """The temp dir `tempfile` picks in process `pid`, from its initial environment; None if unknown."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    for name in (b"TMPDIR", b"TEMP", b"TMP"):
        value = env.get(name)
        if value:
            return os.path.realpath(os.fsdecode(value))
    return os.path.realpath("/tmp")


def _is_python(pid: int, maps: str) -> bool:
    if "libpython" in maps:
        return True
    try:
        return "python" in os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False


def temp_dir_users(temp_dir: str | os.PathLike[str], python: bool = False) -> tuple[TempDirUser, ...]:
    """Live processes on this host that may own an `hf_datasets-*` folder in `temp_dir`.

    Such a folder lives as long as its process, which holds nothing in it between writes (its
    datasets may have been dropped, or the first map has not written yet), so an open-files check
    alone cannot prove it dead. A process that has pyarrow mapped, uses this temp dir and started
    before the folder existed may be its owner. With `python`, any live Python process counts (the
    owners of `pymp-*` folders: `multiprocessing.util.get_temp_dir()` makes one that nothing holds
    open). (A process that changed TMPDIR after it started is judged by its initial environment.)"""
    from cachetool.processes import process_start

    target = os.path.realpath(temp_dir)
    me = os.getpid()
    out: list[TempDirUser] = []
    try:
        pids = list(_proc_pids())
    except OSError:
        return ()
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                maps = f.read()
        except OSError:
            continue
        if not (_is_python(pid, maps) if python else "libarrow" in maps):
            continue
        where = _proc_temp_dir(pid)
        if where is not None and where != target:
            continue
        started = process_start(pid)
        if started is not None:
            out.append(TempDirUser(pid, started))
    return tuple(out)
