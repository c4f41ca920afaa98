"""Who is using a file right now: live processes of this host (one pass over `/proc` per question,
never one per item; psutil where there is no `/proc`), leases of runs on other hosts, and the
filelocks of a `datasets` cache (a probe never creates a lock nor follows a symlink; what it cannot
tell counts as held). gc and verify ask here, never elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from cachetool.cache import layout
from cachetool.cache.fstype import FileSystem, file_system
from cachetool.cache.layout import LEDGER_DIR, LockKind
from cachetool.cache.lease import CLOCK_SKEW, Lease, LeaseState, lease_state, read_lease
from cachetool.cache.roots import LEASES_DIR, ONCE_DIR, leases_dir
from cachetool.errors import CachetoolError
from cachetool.formatting import compact_duration, safe_text
from cachetool.maintenance.fdops import O_DIR, open_parent
from cachetool.processes import process_start, this_host

if TYPE_CHECKING:
    from cachetool.history.writer import GcLog


#: The folders of a root's `.cachetool/` that hold leases: the runs' and their steps' (`run --once`).
LEASE_FOLDERS = (LEASES_DIR, ONCE_DIR)


def judge_leases(root: str | os.PathLike[str]) -> list[tuple[Lease, LeaseState]]:
    """Every lease of `root`, the runs' and their steps', with its state (unreadable lease files
    are left alone)."""
    me = this_host()
    out = []
    for sub in LEASE_FOLDERS:
        folder = Path(root) / LEDGER_DIR / sub
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue
            lease = read_lease(folder / name)
            if lease is not None:
                out.append((lease, lease_state(lease, me)))
    return out


def lease_kind(lease: Lease) -> str:
    """What gc's lines call a lease: "lease" (a run's), "step lease <file>" (`run --once`)."""
    return f"step lease {lease.path.name}" if lease.path.parent.name == ONCE_DIR else "lease"


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
    #: The same working folders by (device, inode), and the mapped files alone, by the device
    #: maps names (`pids_holding` asks both).
    cwd_keys: dict[FileKey, frozenset[int]] = field(default_factory=dict, compare=False)
    maps: dict[FileKey, frozenset[int]] = field(default_factory=dict, compare=False)
    #: pid -> (pyarrow loaded, libpython loaded) of each process whose maps were read
    #: (`temp_dir_users`).
    programs: dict[int, tuple[bool, bool]] = field(default_factory=dict, compare=False)

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
    """Every process of this host but this one, counted as one pass (`proc_passes`)."""
    global proc_passes
    proc_passes += 1
    me = os.getpid()
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != me]


@functools.cache
def _dev_from_maps(dev: bytes) -> int:
    """The device number of a maps line's `major:minor` (hex); -1 (no device) if unreadable."""
    try:
        major, minor = dev.split(b":")
        return os.makedev(int(major, 16), int(minor, 16))
    except ValueError:
        return -1


#: A maps line of a file (inode not 0, a name): its device, inode and name. One search over the
#: whole file in C instead of splitting each of its (often thousands of) lines in Python.
_MAPPED_FILE = re.compile(
    rb"^[0-9a-f]+-[0-9a-f]+ \S+ [0-9a-f]+ ([0-9a-f]+:[0-9a-f]+) ([1-9][0-9]*)[ \t]+(\S[^\n]*)$", re.M
)


def scan_in_use(root: str | os.PathLike[str] | None = None, writers: bool = True) -> InUse:
    """One pass over every process this user may inspect but this one: what each holds open,
    maps and works in, and whether it may keep folders in a temp dir (`temp_dir_users`); with
    `root`, the live leases of that cache root too (processes on other hosts, or on this one,
    that may be writing in it). Without `writers`, which descriptors are open for writing is not
    read (`InUse.writers` stays empty): a third of the pass's cost, which gc does not need."""
    if not os.path.isdir("/proc/self/fd"):
        snapshot = _scan_psutil()
    else:
        found: dict[str, dict[Any, set[int]]] = {name: defaultdict(set) for name in _FOUND}
        programs: dict[int, tuple[bool, bool]] = {}
        complete = True
        for pid in _proc_pids():
            fds = _read_fds(pid, found, writers)
            if fds == "gone":
                continue  # exited meanwhile
            if fds == "denied" or _read_maps(pid, found, programs) == "denied":
                complete = False
            with contextlib.suppress(OSError):
                found["cwds"][os.readlink(f"/proc/{pid}/cwd")].add(pid)
                st = os.stat(f"/proc/{pid}/cwd")
                found["cwd_keys"][(st.st_dev, st.st_ino)].add(pid)
        frozen: dict[str, Any] = {name: _frozen(v) for name, v in found.items()}
        snapshot = InUse(complete=complete, programs=programs, **frozen)
    return snapshot if root is None else replace(snapshot, leases=live_leases(root))


def live_leases(root: str | os.PathLike[str]) -> tuple[Lease, ...]:
    """The live leases of `root` that speak for processes `/proc` cannot show: other hosts, other
    PID namespaces. (A live lease of this host adds nothing: what its process writes, it holds
    open, and gc's other rules keep what it writes in bursts.)"""
    return SharedState(None, tuple(judge_leases(root))).guarding


def _frozen(found: dict[_K, set[int]]) -> dict[_K, frozenset[int]]:
    return {k: frozenset(v) for k, v in found.items()}


_K = TypeVar("_K")
_Read = Literal["read", "gone", "denied"]
#: What one pass collects, each a field of `InUse`.
_FOUND = ("holders", "writers", "paths", "cwds", "cwd_keys", "maps")


def _read_fds(pid: int, found: dict[str, dict[Any, set[int]]], writers: bool) -> _Read:
    """Add what process `pid` holds open (and, with `writers`, opened for writing) to `found`."""
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
        except PermissionError:
            # Listed but not readable (the same ptrace check guards every link, and the maps):
            # the rest would only fail alike, one exception each.
            return "denied"
        except OSError:
            continue
        if not target.startswith("/"):
            # A pipe, socket or anonymous inode: on a pseudo file system, never a file of a cache
            # or temp dir, so its inode is not asked for.
            if target.startswith("socket:["):
                found["paths"][target].add(pid)  # who listens on a bound socket (`socket_reason`)
            continue
        try:
            st = os.stat(f"{fd_dir}/{fd}")
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        found["holders"][key].add(pid)
        found["paths"][target].add(pid)
        if writers and _opened_for_writing(pid, fd):
            found["writers"][key].add(pid)
    return "read"


def _opened_for_writing(pid: int, fd: str) -> bool:
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as f:
            flags = next(line for line in f if line.startswith("flags:"))
        return bool(int(flags.split()[1], 8) & (os.O_WRONLY | os.O_RDWR))
    except (OSError, ValueError, StopIteration):
        return False


def _read_maps(
    pid: int, found: dict[str, dict[Any, set[int]]], programs: dict[int, tuple[bool, bool]]
) -> _Read:
    """Add the files process `pid` has memory-mapped to `found`, and to `programs` whether it
    has pyarrow and libpython loaded."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            maps = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
    except OSError:
        return "denied"
    # A library is mapped in several segments: each distinct (device, inode, name) once.
    for dev, ino, name in set(_MAPPED_FILE.findall(maps)):
        key = (_dev_from_maps(dev), int(ino))
        found["holders"][key].add(pid)
        found["maps"][key].add(pid)
        if name.startswith(b"/"):
            found["paths"][name.decode("utf-8", "replace")].add(pid)
    programs[pid] = (b"libarrow" in maps, b"libpython" in maps)
    return "read"


def pids_holding(keys: Iterable[FileKey]) -> dict[FileKey, frozenset[int]]:
    """Which live processes hold any of these files open or memory-mapped, or have one of these
    folders as their working folder: one fresh pass (`scan_in_use`) for all of them.

    The check gc makes after it took items out of reach: for every process the open
    descriptors are read before its memory maps, so a reader that opened the file before it was
    moved and mapped it since is seen by one or the other."""
    wanted = set(keys)
    if not wanted:
        return {}
    now = scan_in_use(writers=False)
    devs = {d for d, _ in wanted}
    # Some file systems (overlay, btrfs) show another device number in maps than stat gives: a
    # mapping of a wanted inode on a device no wanted file is on counts too, to be safe.
    foreign: dict[int, frozenset[int]] = defaultdict(frozenset)
    for (dev, ino), pids in now.maps.items():
        if dev not in devs:
            foreign[ino] |= pids
    found = {
        k: now.holders.get(k, frozenset()) | now.cwd_keys.get(k, frozenset()) | foreign[k[1]] for k in wanted
    }
    return {k: pids for k, pids in found.items() if pids}


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


def socket_reason(folder: str | os.PathLike[str], sockets: Mapping[str, int], in_use: InUse) -> str:
    """Why a folder stays while a live process listens on a socket bound below it (`sockets`, as
    `bound_sockets()` gives them), naming that process (pid and command) when `in_use` shows it."""
    from cachetool.processes import command_line

    prefix = os.fspath(folder).rstrip("/") + "/"
    links = {f"socket:[{ino}]" for path, ino in sockets.items() if path.startswith(prefix) and ino}
    pids = sorted({pid for link in links for pid in in_use.paths.get(link, ())})
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
    """A live process whose environment names a temp dir (or cannot be read) and that may keep
    folders there: `hf_datasets-*` ones when pyarrow is loaded (`arrow`: `datasets` may be),
    `pymp-*` ones when it is Python."""

    pid: int
    started: float  # seconds since the epoch
    arrow: bool = True
    python: bool = True


def _proc_temp_dir(pid: int) -> str | None:
    """The temp dir `tempfile` picks in process `pid`, from its initial environment; None if
    unknown; "" for a process with no memory any more (ending: it makes and uses no folder)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except ProcessLookupError:  # ESRCH: its memory is gone, though /proc still shows it running
        return ""
    except OSError:
        return None
    env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    for name in (b"TMPDIR", b"TEMP", b"TMP"):
        value = env.get(name)
        if value:
            return os.path.realpath(os.fsdecode(value))
    return os.path.realpath("/tmp")


def _is_python(pid: int) -> bool:
    try:
        return "python" in os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False


def temp_dir_users(temp_dir: str | os.PathLike[str], in_use: InUse) -> tuple[TempDirUser, ...]:
    """Live processes of the snapshot `in_use` that may own an `hf_datasets-*` or `pymp-*` folder
    in `temp_dir`.

    Such a folder lives as long as its process, which holds nothing in it between writes (its
    datasets may have been dropped, the first map has not written yet, or it is the folder
    `multiprocessing.util.get_temp_dir()` makes), so an open-files check alone cannot prove it
    dead. (A process that changed TMPDIR after it started is judged by its initial environment.)"""
    target = os.path.realpath(temp_dir)
    out: list[TempDirUser] = []
    for pid, (arrow, libpython) in sorted(in_use.programs.items()):
        python = libpython or _is_python(pid)
        if not (arrow or python):
            continue
        where = _proc_temp_dir(pid)
        if where is not None and where != target:
            continue
        started = process_start(pid)
        if started is not None:
            out.append(TempDirUser(pid, started, arrow, python))
    return tuple(out)


_O_PROBE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class LockState(str, Enum):
    """What a non-blocking probe of one lock file found."""

    MISSING = "missing"  # no file: held by nobody
    FREE = "free"  # the probe won the flock (and released it)
    HELD = "held"  # a live process holds it
    UNKNOWN = "unknown"  # could not open or flock it: treated as held

    @property
    def held(self) -> bool:
        """The safe reading: held, or no way to tell."""
        return self in (LockState.HELD, LockState.UNKNOWN)


class LockBusy(Exception):
    """`acquire` could not win the lock: held by a live process (HELD), or no way to tell (UNKNOWN)."""

    def __init__(self, state: LockState, name: str, detail: str = "") -> None:
        held = state == LockState.HELD
        super().__init__(
            f"{name} is held by a live process"
            if held
            else f"cannot tell whether {name} is held ({detail or 'cannot probe it'})"
        )
        self.state = state


def acquire(name: str | os.PathLike[str], dir_fd: int | None = None) -> int | None:
    """Win the lock at `name` (relative to `dir_fd` when given) without blocking and without
    creating it. Returns the descriptor holding it (closing it releases the lock), or None when
    there is no such file. Raises `LockBusy` (HELD or UNKNOWN) when it cannot be won."""
    shown = os.path.basename(os.fsdecode(name))
    try:
        fd = os.open(name, _O_PROBE, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        detail = "a symlink, never followed" if e.errno == errno.ELOOP else (e.strerror or str(e))
        raise LockBusy(LockState.UNKNOWN, shown, detail) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise LockBusy(LockState.HELD, shown) from None
        raise LockBusy(LockState.UNKNOWN, shown, e.strerror or str(e)) from None
    return fd


def probe(path: str | os.PathLike[str]) -> LockState:
    """Is the lock at `path` held? Never creates the file, never follows a symlink."""
    try:
        fd = acquire(path)
    except LockBusy as busy:
        return busy.state
    if fd is None:
        return LockState.MISSING
    os.close(fd)  # closing releases the flock we won
    return LockState.FREE


@dataclass(frozen=True)
class Guard:
    """What one lock file guards: it is useful while any of `paths` exists."""

    kind: LockKind
    name: str  # the guarded file or folder's name; for a root lock, its mangled path
    paths: tuple[Path, ...]  # for a root lock: the existing folders its name decodes to

    def alive(self, ignoring: frozenset[Path] = frozenset()) -> bool:
        """Does something it guards still exist (not counting `ignoring`, about to go)?"""
        return any(os.path.lexists(g) and g not in ignoring for g in self.paths)


def lock_guard(
    lock: Path, root: Path | None = None, listings: dict[Path, list[str]] | None = None
) -> Guard | None:
    """What the lock file `lock` guards. `<dir>_builder.lock` and `<dir>.incomplete_info.lock`
    guard `<dir>` (and its `.incomplete` while preparing); `downloads/<name>.lock` the download
    (and its `.incomplete`); `extracted/<sha>.lock` its folder; a lock directly in the cache
    `root` named after an absolute folder path guards that folder (decoded against the file
    system; `listings` caches folder listings across calls). None: a lock nobody can attribute,
    or a decoding that could not finish."""
    parent = lock.parent
    got = layout.parse_lock_name(
        lock.name, parent.name, parent.parent.name, root is not None and parent == root
    )
    if got is None:
        return None
    kind, base = got
    if kind == LockKind.ROOT:
        found = _decode_root_lock(base, listings if listings is not None else {})
        return None if found is None else Guard(kind, base, found)
    if kind == LockKind.EXTRACTION:
        return Guard(kind, base, (parent / base,))
    return Guard(kind, base, (parent / base, parent / (base + layout.INCOMPLETE_DIR_SUFFIX)))


def _decode_root_lock(
    mangled: str, listings: dict[Path, list[str]], budget: int = 64
) -> tuple[Path, ...] | None:
    """Existing folders whose absolute path, "/" turned into "_", is `mangled` (the ambiguity of
    "_" is resolved by looking at what exists). Empty: nothing matches, the folder is gone. None:
    a folder on the way could not be listed or the search ran too long, so nobody knows."""
    found: list[Path] = []
    calls = 0
    unsure = False

    def walk(folder: Path, rest: str) -> None:
        nonlocal calls, unsure
        if calls >= budget:
            unsure = True
            return
        calls += 1
        names = listings.get(folder)
        if names is None:
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                return
            except OSError:
                unsure = True
                return
            listings[folder] = names
        for n in names:
            if n in (rest, rest + layout.INCOMPLETE_DIR_SUFFIX):
                found.append(folder / n)
            elif rest.startswith(n + "_") and os.path.isdir(folder / n):
                walk(folder / n, rest[len(n) + 1 :])

    walk(Path("/"), mangled[1:])
    if found:
        return tuple(found)
    return None if unsure else ()


#: The smallest `--min-age` gc accepts for unleased temp files on a shared file system: a writer
#: on another host that holds no lease shows only through its file's age.
SHARED_MIN_AGE_FLOOR = 600.0


@dataclass(frozen=True)
class SharedState:
    """What gc knows about other writers of one root: its file system and its leases."""

    filesystem: FileSystem | None
    leases: tuple[tuple[Lease, LeaseState], ...] = ()
    #: For a stale lease (by its file name): the other known roots where the same run holds one
    #: (a `save_to_disk` folder a map after `load_from_disk` wrote in): its leftovers may be there.
    elsewhere: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def live(self) -> tuple[Lease, ...]:
        return tuple(lease for lease, state in self.leases if state == "live")

    @property
    def guarding(self) -> tuple[Lease, ...]:
        """The live leases gc's rules read (`live_leases`)."""
        me = this_host()
        return tuple(lease for lease in self.live if not lease.is_local(me))

    @property
    def stale(self) -> tuple[tuple[Lease, LeaseState], ...]:
        return tuple((lease, state) for lease, state in self.leases if state != "live")

    root: str = ""  # for the command that breaks a lease

    def notes(self) -> list[str]:
        """Lines for the plan: the file system when shared, the live and stale leases."""
        now, out = time.time(), []
        fs = self.filesystem
        if fs is not None and fs.shared:
            out.append(
                f"the cache is on {fs.type} ({fs.source or '?'} at {fs.mount_point or '?'}), shared with "
                "other hosts: their processes are invisible here, only their leases protect their files"
            )
        for lease in self.live:
            out.append(
                f"live lease: {lease} (renewed {max(0.0, now - lease.renewed):.0f}s ago, "
                f"{_expiry(lease, now)}): {safe_text(os.fsdecode(lease.path))}"
            )
            out.append(f"  if its process is gone: `{break_command(self.root, lease)}`")
        # A plan, shown before it runs (or when it is refused): what happened is the result's.
        for lease, state in self.stale:
            out.append(f"{_stale_reason(lease, state, now)}: its {lease_kind(lease)} would be removed")
            for other in self.elsewhere.get(lease.path.name, ()):
                from cachetool.hints import shell_command

                command = shell_command("gc", "--temp", "--cache-dir", other)
                out.append(f"  it also wrote in {other}, a cache root of its own: `{command}`")
        return out

    def to_json(self) -> dict[str, Any]:
        leases = []
        for lease, state in self.leases:
            doc = dict(lease.to_json(), state=state)
            if state != "live":
                doc["also_in"] = list(self.elsewhere.get(lease.path.name, ()))
            leases.append(doc)
        return {"filesystem": self.filesystem.to_json() if self.filesystem else None, "leases": leases}


def dead_writer_hint(
    root: Path, state: SharedState, young: Mapping[Path, float | None], min_age: float, kept_as: str = ""
) -> str | None:
    """The command that removes now the leftovers kept only as younger than `min_age` (or, with
    `kept_as`, for the reason it says; paths to their last modification) that a traced run of
    this host may have left: its process is gone
    (its lease is dead) and it was running when they were last written, and no process holds
    them (else they would not be kept for their age). None on a shared file system, where a
    writer on another host may hold what `/proc` does not show."""
    fs = state.filesystem
    if fs is not None and fs.shared:
        return None
    dead = [lease for lease, s in state.stale if s == "dead" and lease.path.parent.name == LEASES_DIR]
    by_lease: dict[Lease, list[Path]] = {}
    for path, mtime in sorted(young.items()):
        # A dead lease's window runs until it would expire, so a run killed earlier may still
        # cover the file: the latest started of those that do is the one that last wrote it.
        could = [x for x in dead if mtime is not None and x.start - 1.0 <= mtime <= x.expires]
        lease = max(could, key=lambda x: x.start, default=None)
        if lease is not None:
            by_lease.setdefault(lease, []).append(path)
    if not by_lease:
        return None
    leases = ", ".join(str(lease) for lease in by_lease)
    paths = [p for ps in by_lease.values() for p in ps]
    n = f"{len(paths)} file{'s' if len(paths) != 1 else ''}"
    them = "them" if len(paths) != 1 else "it"
    from cachetool.hints import gc_command

    command = gc_command(root, *(os.fsdecode(p) for p in paths))
    return (
        f"{leases}, a traced run that wrote here, is gone, and no process holds the {n} kept "
        f"{kept_as or f'as younger than --min-age {compact_duration(min_age)}'} that it may have left "
        f"unfinished: `{command}` removes {them} now (checked again right before)"
    )


def _expiry(lease: Lease, now: float) -> str:
    """`expires in 45s (2026-11-28 05:30:00 UTC)`, or what says when this host checks it."""
    if lease.is_local(this_host()):
        return "lives while its process on this host does"
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(lease.expires))
    return f"expires in {max(0.0, lease.expires - now):.0f}s ({at})"


def break_command(root: str | os.PathLike[str], lease: Lease) -> str:
    """`cachetool gc --break-lease ID --cache-dir ROOT` (ID: the lease file's name without `.json`)."""
    from cachetool.hints import shell_command

    lease_id = lease.path.name.removesuffix(".json")
    return shell_command("gc", "--break-lease", lease_id, "--cache-dir", os.fsdecode(root))


def break_lease(root: str | os.PathLike[str], name: str) -> Lease:
    """Remove the lease `name` (its file name, with or without `.json`) of `root`, live or not:
    for a lease whose process the user knows is gone (a host that died, a forged lease). Logged
    in the ledger as gc's removals are. A `CachetoolError` (exit 2) when the root has no such lease."""
    from cachetool.history.writer import GcLog

    root_path = Path(os.path.abspath(os.fspath(root)))
    missing = CachetoolError(
        f"no lease {safe_text(name)} in {safe_text(os.fsdecode(root_path))} (gc lists them)"
    )
    file = name if name.endswith(".json") else f"{name}.json"
    valid = "/" not in file and file != ".json"
    found = [
        (sub, x) for sub in LEASE_FOLDERS if valid and (x := read_lease(root_path / LEDGER_DIR / sub / file))
    ]
    if not found:
        raise missing
    (sub, lease), *_ = found
    root_fd = os.open(root_path, O_DIR)
    try:
        size, _ = _unlink_lease(root_fd, sub, file)
    except (FileNotFoundError, LookupError):
        raise missing from None
    finally:
        os.close(root_fd)
    with GcLog(root_path) as log:
        _log_removal(log, lease, size, f"{lease}: broken by the user (gc --break-lease)")
    return lease


def _unlink_lease(
    root_fd: int, sub: str, file: str, why: Callable[[Lease], str | None] = lambda _: ""
) -> tuple[int, str]:
    """Remove the lease file `file` of `.cachetool/<sub>/`, reached from the root's descriptor
    without following a symlink, when `why(the lease as read now)` gives a reason; its size and
    that reason (else `LookupError`)."""
    fd = open_parent(root_fd, (LEDGER_DIR, sub, file))
    try:
        again = read_lease(Path(f"/proc/self/fd/{fd}") / file)
        reason = why(again) if again is not None else None
        if reason is None:
            raise LookupError(file)
        size = os.stat(file, dir_fd=fd, follow_symlinks=False).st_size
        os.unlink(file, dir_fd=fd)
        return size, reason
    finally:
        os.close(fd)


def _log_removal(log: GcLog, lease: Lease, size: int, reason: str) -> None:
    log.removed(kind="lease", paths=[lease.path], size=size, files=1, reason=reason, when=time.time())


def _stale_reason(lease: Lease, state: LeaseState, now: float) -> str:
    if state == "dead":
        return f"{lease}: this host, its process is gone"
    return f"{lease}: expired {max(0.0, now - lease.expires):.0f}s ago (not renewed)"


def shared_state(root: str | os.PathLike[str]) -> SharedState:
    """The file system of `root` and every lease in it, judged now; for each stale one, the other
    known roots where its run holds a lease too."""
    try:
        fs: FileSystem | None = file_system(root)
    except OSError:
        fs = None
    leases = tuple(judge_leases(root))
    stale = [lease for lease, state in leases if state != "live"]
    return SharedState(fs, leases, _elsewhere(Path(root), stale), os.fsdecode(root))


def _elsewhere(root: Path, stale: list[Lease]) -> dict[str, tuple[str, ...]]:
    """Lease file name -> the other roots of the registry (`cachetool.cache.roots`) holding a
    lease of that name: one run (host, pid, start) leases every root it writes in."""
    if not stale:
        return {}
    from cachetool.cache.roots import other_roots

    others = [path for path, _ in other_roots(root)]
    found = {}
    for lease in stale:
        name = lease.path.name
        there = tuple(r for r in others if os.path.isfile(leases_dir(r) / name))
        if there:
            found[name] = there
    return found


def check_min_age(root: Path, state: SharedState, min_age: float, temp: bool, other_hosts_idle: bool) -> None:
    """Refuse a `--temp` run with `--min-age` under the floor on a shared file system."""
    fs = state.filesystem
    if temp and fs is not None and fs.shared and min_age < SHARED_MIN_AGE_FLOOR and not other_hosts_idle:
        raise CachetoolError(
            f"{root} is on {fs.type} (a file system other hosts may write): --min-age {min_age:g}s is "
            f"below the {SHARED_MIN_AGE_FLOOR / 60:g} min floor for temp files no lease covers, "
            "since writers on other hosts are invisible here; pass --other-hosts-idle if no process on "
            "another host writes this cache without a cachetool lease"
        )


def remove_stale_leases(root_fd: int, state: SharedState, log: GcLog | None) -> list[Lease]:
    """Remove the leases that were stale at plan time and still are (a lease renewed since, or
    whose process turns out alive, stays). Every removal is logged."""

    def still_stale(lease: Lease) -> str | None:
        now = lease_state(lease)
        return None if now == "live" else _stale_reason(lease, now, time.time())

    removed: list[Lease] = []
    for lease, _ in state.stale:
        try:
            size, reason = _unlink_lease(root_fd, lease.path.parent.name, lease.path.name, still_stale)
        except (OSError, LookupError):
            continue
        removed.append(lease)
        if log is not None:
            with contextlib.suppress(Exception):
                _log_removal(log, lease, size, reason)
    return removed
