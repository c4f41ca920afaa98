"""`python -m cachetool ARGS` as a process forked from a warm parent: `forks.run` is
`subprocess.run` for a cachetool command line, without the interpreter start and the imports
(about 0.2 s of CPU per command, most of what a test of `ls` or `verify` spends). A test's own
script, `python SCRIPT.py ARGS`, runs forked the same way (in `__main__`, its folder first on
`sys.path`), with `preload=PIPELINE` when it imports `datasets`.

A warm parent (the zygote: a Python process started once per pytest worker, on the first `run`,
and ended at the end of the session) imports what a `python -m cachetool` imports before it does
the work (the entry, the Typer app with its Click, shellingham and the pydantic
its option parsing loads, the model modules of the commands), and nothing heavy (no pyarrow,
numpy, dill or datasets: a listing behaves differently with them loaded). For each command line
it forks a child that is a real process of its own (own pid, the caller's stdin/stdout/stderr, a
real exit status, signals by its pid), whose environment, working directory, argv, `sys.path[0]`
and standard streams are made what a fresh `python -m cachetool` started by `subprocess.run`
would have, and which runs `-m cachetool` as the interpreter does (`runpy._run_module_as_main`),
then ends as the interpreter ends (the exit code of a `SystemExit`, a traceback and 1 for an
exception, atexit handlers, flushed streams). Its exit status is read by the zygote, which reaps
every child and writes the status back on a pipe of that command alone.

What a process reads at import it reads under the zygote's environment, not the child's. The
zygote records every variable its imports read and every `os.getcwd()`, and a command line runs
in a zygote whose environment has the same values for those and for what the interpreter itself
reads at start (`PYTHON*`, `LC_*`, `LANG`, `TZ`): another value starts another zygote. An import
that reads the whole environment or the working directory makes the zygote refuse to start.
What they read today: Typer `TYPER_USE_RICH` (typer.core); the standard modules pydantic brings
in `HOME`, `PYTHONUSERBASE` and `_PYTHON_*` (sysconfig's user base) and `PYTHONTZPATH`
(zoneinfo); cachetool, Typer's Click and shellingham nothing, and none asks for the working
directory. Rich and typer.rich_utils (which reads `TERMINAL_WIDTH`, `FORCE_COLOR` and more at
import) are not imported by the zygote: a child imports them under its own environment.

What a fork cannot give: the hash seed of `str` (randomized once per interpreter) is the
zygote's, shared by its children. So `check-determinism` (which compares runs made under
different seeds) stays a cold exec, and so does every test about start-up itself: imports,
`--version`, packaging, a closed stdout. `cachetool run` of a pipeline forks only
where a test asks for it (`preload=PIPELINE`, `cachetool_run(..., warm=True)` in conftest): its
runs then share one hash seed, which a test whose runs could differ by the seed must not.
The legacy global random state of numpy (seeded at its import, and what `datasets` draws an
unseeded shuffle's seed from) is seeded again in each child, as a fresh interpreter has its own.

Where `os.fork` or `os.pidfd_open` is missing, or with `CACHETOOL_TESTS_COLD=1` in the
environment of the tests, `run` is `subprocess.run`.

This module imports the standard library only: the zygote loads it by path.
"""

from __future__ import annotations

import atexit
import gc
import io
import json
import locale
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: What a cold `python -m cachetool` is: `forks.run` takes exactly this prefix.
CLI = (sys.executable, "-m", "cachetool")
#: Imported by the zygote: what `python -m cachetool` imports before it reads its command line,
#: what the Typer app imports to read options (pydantic, through Typer's adapters) and the model
#: modules the commands import (a child would import each again, 0.05 to 0.1 s of CPU). pydantic
#: and Typer load the parts that read options on first use: those are named. A name that no
#: longer exists is skipped.
WARM = (
    "cachetool.cli.entry",
    "cachetool.cli.app",
    "pydantic",
    "typer._adapters",
    "pydantic.main",
    "pydantic.type_adapter",
    "pydantic.json_schema",
    "pydantic.plugin._loader",
    "typer._click.decorators",
    "importlib.metadata",
    "zoneinfo",
    "runpy",
    "cachetool.cache.locations",
    "cachetool.cache.pins",
    "cachetool.cache.scan",
    "cachetool.cache.selection",
    "cachetool.history.ledger",
    "cachetool.history.ledger_stats",
    "cachetool.history.compact",
    "cachetool.maintenance.verify",
    "cachetool.maintenance.gc.execute",
)
#: Never imported by the zygote (a listing's reader behaves differently with numpy or pyarrow
#: loaded; `datasets` and huggingface_hub read the environment at import).
HEAVY = (
    "pyarrow",
    "numpy",
    "dill",
    "datasets",
    "huggingface_hub",
    "torch",
    "transformers",
    "regex",
    "spacy",
    "tiktoken",
)
#: `preload` for `cachetool run` of a pipeline: what `import datasets` spends most of its time on
#: (about 0.5 s of CPU of its 0.85), of what reads neither the whole environment, nor the working
#: directory, nor the temp dir at import (dill, multiprocess, fsspec and tqdm do: `datasets`
#: itself and huggingface_hub read HF_* variables). A forked run costs about 0.35 s of CPU
#: where a cold one costs 1.1.
PIPELINE = ("pyarrow", "numpy", "pandas", "xxhash", "requests", "yaml", "aiohttp", "filelock")
#: What the interpreter reads from the environment as it starts (not through `os.environ`).
STARTUP_PREFIXES = ("PYTHON", "LC_")
STARTUP_NAMES = ("LANG", "TZ")
COLD = "CACHETOOL_TESTS_COLD"
#: How long a zygote may take to import the CLI (about 0.1 s of CPU: minutes only on a machine
#: so loaded that every test would fail anyway).
START_TIMEOUT = 120.0
#: Zygotes kept at once (one per environment that differs in what the imports read, such as a
#: test's own HOME, and per `preload`: the plain one, pyarrow's and PIPELINE's are in use all
#: along); the one used longest ago is ended to make room.
KEEP = 4


class ZygoteDied(RuntimeError):
    """The warm parent is gone: the command's status cannot be known."""


# ---------------------------------------------------------------------------------------------
# The caller's side (the test process)


def _is_cli(args: Sequence[str]) -> bool:
    """`python -m cachetool ...`."""
    return tuple(args[: len(CLI)]) == CLI


def _is_script(args: Sequence[str]) -> bool:
    """`python SCRIPT.py ...` or `python -c CODE ...` (a script of the tests: run with
    `preload=PIPELINE` when it imports `datasets`, on the terms of `cachetool run`'s warm runs,
    see the module's docstring)."""
    if len(args) < 2 or args[0] != sys.executable:
        return False
    return str(args[1]).endswith(".py") or (args[1] == "-c" and len(args) >= 3)


def available() -> bool:
    """Whether commands run forked (else `run` is `subprocess.run`)."""
    return (
        hasattr(os, "fork")
        and hasattr(os, "pidfd_open")
        and hasattr(socket, "send_fds")
        and os.environ.get(COLD, "") in ("", "0")
    )


def _key(env: Mapping[str, str], read: frozenset[str] = frozenset()) -> dict[str, str]:
    """The values in `env` a zygote's children share with it: what the interpreter reads at
    start, and `read` (what the zygote's imports read)."""
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES or k in read}


@dataclass
class Zygote:
    """One warm parent: its process, the socket it reads command lines from, the variables its
    imports read and their values (with the interpreter's own) in its environment."""

    proc: subprocess.Popen[bytes]
    sock: socket.socket
    read: frozenset[str]
    key: dict[str, str]
    log: str
    preload: tuple[str, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)
    spent: float = 0.0  # CPU seconds of its children that ended (counted in `forked_cpu`)

    def serves(self, env: Mapping[str, str], preload: tuple[str, ...] = ()) -> bool:
        return preload == self.preload and _key(env, self.read) == self.key

    def died(self, what: str) -> ZygoteDied:
        code = self.reap(5)
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                tail = f.read()[-2000:]
        except OSError:
            tail = ""
        return ZygoteDied(
            f"the warm cachetool parent (pid {self.proc.pid}) died {what}: exit status {code}"
            + (f"; its stderr ends:\n{tail}" if tail else "")
        )

    def exited(self) -> bool:
        """Whether the zygote has ended, without reaping it (`close` reads its CPU first)."""
        if self.proc.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def reap(self, timeout: float) -> int | None:
        """Its exit status once it ended (within `timeout` seconds, else None), counting its CPU
        (`_count_reaped`) before it is reaped."""
        deadline = time.monotonic() + timeout
        while not self.exited():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)
        _count_reaped(self)
        return self.proc.wait()

    def close(self) -> None:
        """End the zygote (its children still running are killed, all are reaped) and reap it."""
        self.sock.close()  # it reads end-of-file: kills what still runs, reaps, exits
        if self.reap(30) is None:
            self.proc.kill()
            self.reap(30)
        try:
            os.unlink(self.log)
        except OSError:
            pass


def _count_reaped(zygote: Zygote) -> None:
    """Before the ended `zygote` is reaped: what its reaping adds to this process's
    RUSAGE_CHILDREN (its own CPU and that of every child it reaped, from its /proc stat, which
    an unreaped process keeps) goes to `_reaped`, and what of it `forked_cpu` did not count (the
    zygote's own: its imports, its forks, and children killed at its end) to `_zygotes_own`."""
    if zygote.proc.returncode is None:
        try:
            os.waitid(os.P_PID, zygote.proc.pid, os.WEXITED | os.WNOWAIT)  # returns once it ended
            with open(f"/proc/{zygote.proc.pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return  # reaped elsewhere: its CPU counts where that happened
        ticks = os.sysconf("SC_CLK_TCK")
        total = sum(int(x) for x in fields[11:15]) / ticks  # utime, stime, cutime, cstime
        global _reaped, _zygotes_own
        _reaped += total
        _zygotes_own += max(0.0, total - zygote.spent)


_zygotes: list[Zygote] = []
_lock = threading.Lock()
#: CPU seconds of the children that ended, by the `preload` of their zygote (`forked_cpu`).
_spent: dict[tuple[str, ...], float] = {}
#: CPU seconds that the zygotes reaped so far added to this process's RUSAGE_CHILDREN (theirs
#: and their children's), and the part of it that is the zygotes' own (`zygote_cpu`).
_reaped = 0.0
_zygotes_own = 0.0


def forked_cpu() -> tuple[float, float]:
    """CPU seconds (user + system, their own children included) of the forked commands that
    have ended in this process so far, those of PIPELINE (`cachetool run`) apart:
    `resource.getrusage(RUSAGE_CHILDREN)` counts them only once their zygote is reaped (see
    `zygote_cpu`). (commands, pipelines)"""
    pipelines = _spent.get(PIPELINE, 0.0)
    return sum(_spent.values()) - pipelines, pipelines


def zygote_cpu() -> tuple[float, float]:
    """(the own CPU seconds of the zygotes reaped so far, those not in `forked_cpu`;
    what reaping them added to `resource.getrusage(RUSAGE_CHILDREN)`, `forked_cpu` included)."""
    return _zygotes_own, _reaped


def _start(env: Mapping[str, str], preload: tuple[str, ...] = ()) -> Zygote:
    here, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fd, log = tempfile.mkstemp(prefix="cachetool-zygote-", suffix=".log")
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('_cachetool_zygote', {__file__!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules[spec.name] = module\n"
        "spec.loader.exec_module(module)\n"
        f"module.serve({theirs.fileno()}, {preload!r})\n"
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=dict(env),
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=fd,
            pass_fds=[theirs.fileno()],
        )
    finally:
        theirs.close()
        os.close(fd)
    zygote = Zygote(proc, here, frozenset(), {}, log, preload)
    ready, _, _ = select.select([here], [], [], START_TIMEOUT)
    hello = here.recv(1 << 16) if ready else b""
    if not hello:
        proc.kill()
        raise zygote.died("before it was ready")
    answer = json.loads(hello)
    if "refused" in answer:
        zygote.close()
        raise RuntimeError(f"the warm cachetool parent cannot serve: {answer['refused']}")
    zygote.read = frozenset(answer["read"])
    zygote.key = _key(env, zygote.read)
    return zygote


def zygote_for(env: Mapping[str, str], preload: tuple[str, ...] = ()) -> Zygote:
    """The running zygote whose environment serves `env` (that has imported `preload` too),
    started if there is none."""
    with _lock:
        for z in list(_zygotes):
            if z.exited():  # died between commands: start another
                _zygotes.remove(z)
                z.close()
            elif z.serves(env, preload):
                _zygotes.remove(z)
                _zygotes.append(z)  # the most recently used last
                return z
        while len(_zygotes) >= KEEP:
            _zygotes.pop(0).close()
        z = _start(env, preload)
        _zygotes.append(z)
        return z


def close_all() -> None:
    """End every zygote of this process (at the end of the session)."""
    with _lock:
        while _zygotes:
            _zygotes.pop().close()


atexit.register(close_all)


def _fd_for(spec: Any, std: int, mode: str, ours: list[int]) -> tuple[int, int | None]:
    """(the fd the child gets, the fd this process reads or writes, if a pipe) for a
    `subprocess`-style stdin/stdout/stderr argument."""
    if spec is None:
        return std, None
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        ours.append(fd)
        return fd, None
    if spec == subprocess.PIPE:
        r, w = os.pipe()
        child, mine = (r, w) if mode == "r" else (w, r)
        ours.append(child)
        return child, mine
    if isinstance(spec, int):
        return spec, None
    return spec.fileno(), None


class ForkedProcess:
    """A cachetool command running as a child of the zygote: `pid`, `returncode` (a negative
    signal number for a child killed by a signal, as `subprocess`), `wait`, `send_signal`,
    `kill`, `communicate`. `preload`: as for `run`. `start_new_session`: as `subprocess.Popen`'s,
    the child starts a session (and process group) of its own, which `os.killpg(pid)` ends with
    every process it started."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        preload: Sequence[str] = (),
        start_new_session: bool = False,
    ) -> None:
        self.args = list(argv)
        env = dict(os.environ if env is None else env)
        cwd = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd()
        if not os.path.isdir(cwd):  # as subprocess: the error is the caller's, not the child's
            raise FileNotFoundError(2, "No such file or directory", cwd)
        self.returncode: int | None = None
        self.cpu = 0.0  # user + system CPU of the child, once it ended
        ours: list[int] = []  # the child's ends, closed here once the zygote has them
        self._pipes: tuple[int | None, int | None, int | None] = (None, None, None)
        try:
            fd_in, w = _fd_for(stdin, 0, "r", ours)
            fd_out, r_out = _fd_for(stdout, 1, "w", ours)
            if stderr == subprocess.STDOUT:
                fd_err, r_err = fd_out, None
            else:
                fd_err, r_err = _fd_for(stderr, 2, "w", ours)
            self._pipes = (w, r_out, r_err)
            self.stdout_fd, self.stderr_fd = r_out, r_err  # to read from before `communicate`
            self._status, status_w = os.pipe()
            ours.append(status_w)
            self.zygote = zygote_for(env, tuple(preload))
            # A fresh interpreter keeps SIGINT ignored if its caller ignores it (a background job
            # of a non-interactive shell), else makes it KeyboardInterrupt: the child does alike.
            ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            request = json.dumps(
                {
                    "argv": self.args[len(CLI) :] if _is_cli(self.args) else self.args[1:],
                    "script": not _is_cli(self.args),
                    "env": env,
                    "cwd": cwd,
                    "sigint_ignored": ignored,
                    "new_session": start_new_session,
                }
            ).encode()
            try:
                with self.zygote.lock:
                    socket.send_fds(self.zygote.sock, [request], [fd_in, fd_out, fd_err, status_w])
            except OSError as e:
                raise self.zygote.died(f"before it took `{' '.join(self.args[3:])}` ({e})") from e
        except BaseException:
            for fd in self._pipes:
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in ours:
                os.close(fd)
        self._buffer = b""
        line = self._line(START_TIMEOUT)
        if line is None:
            raise self.zygote.died(f"before it started `{' '.join(self.args[3:])}`")
        self.pid = int(line)

    def _line(self, timeout: float | None) -> bytes | None:
        """The next line the zygote writes on this command's status pipe (None at its end)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._status], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(self._status, 4096)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.wait(0)
            except subprocess.TimeoutExpired:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        try:
            line = self._line(timeout)
        except TimeoutError:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0) from None
        os.close(self._status)
        if line is None:
            self.returncode = -1  # unknown
            raise self.zygote.died(f"while `{' '.join(self.args[3:])}` ran (pid {self.pid})")
        status, cpu = line.split()
        self.returncode = os.waitstatus_to_exitcode(int(status))
        self.cpu = float(cpu)
        _spent[self.zygote.preload] = _spent.get(self.zygote.preload, 0.0) + self.cpu
        self.zygote.spent += self.cpu
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the child by its pid while it is known to run (as `Popen.send_signal`)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, input: bytes | None = None, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Write `input`, read the pipes to their end, wait for the status (as `Popen`'s: after
        a TimeoutExpired, call it again to go on)."""
        if not hasattr(self, "_data"):
            w, r_out, r_err = self._pipes
            self._data: dict[int, list[bytes]] = {fd: [] for fd in (r_out, r_err) if fd is not None}
            self._reading = list(self._data)
            self._writing = [w] if w is not None else []
            self._input = memoryview(input or b"")
            if w is not None and not self._input:
                os.close(w)
                self._writing = []
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._reading or self._writing:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise self._timeout(timeout)
            readable, writable, _ = select.select(self._reading, self._writing, [], left)
            for fd in writable:
                try:
                    self._input = self._input[os.write(fd, self._input[: 1 << 16]) :]
                except BrokenPipeError:
                    self._input = memoryview(b"")
                if not self._input:
                    os.close(fd)
                    self._writing = []
            for fd in readable:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    self._data[fd].append(chunk)
                else:
                    os.close(fd)
                    self._reading.remove(fd)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            self.wait(left)
        except subprocess.TimeoutExpired:
            raise self._timeout(timeout) from None
        return self._output(1), self._output(2)  # type: ignore[return-value]

    def close_pipes(self) -> None:
        """Close this side of the pipes `communicate` has not finished with."""
        if hasattr(self, "_data"):
            fds = [*self._reading, *self._writing]
            self._reading, self._writing = [], []
        else:
            fds = [fd for fd in self._pipes if fd is not None]
            self._data = {fd: [] for fd in self._pipes[1:] if fd is not None}
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def _output(self, which: int) -> bytes | None:
        fd = self._pipes[which]
        return None if fd is None else b"".join(self._data[fd])

    def _timeout(self, timeout: float | None) -> subprocess.TimeoutExpired:
        return subprocess.TimeoutExpired(self.args, timeout or 0.0, self._output(1), self._output(2))


def _decode(data: bytes | None, encoding: str, errors: str) -> str | None:
    """As `subprocess` does in text mode (universal newlines)."""
    if data is None:
        return None
    return data.decode(encoding, errors).replace("\r\n", "\n").replace("\r", "\n")


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | bytes | None = None,
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    capture_output: bool = False,
    text: bool = False,
    encoding: str | None = None,
    errors: str | None = None,
    timeout: float | None = None,
    check: bool = False,
    preload: Sequence[str] = (),
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(args, ...)` for `args` = `[sys.executable, "-m", "cachetool", ...]`, the
    command run forked from the zygote: the same arguments, the same `CompletedProcess` (or
    `TimeoutExpired`, the child killed; `CalledProcessError` with `check`).

    `preload` names modules of HEAVY that the command imports in any case (pyarrow, with the
    numpy it imports, for `verify` and `gc`): a zygote of its own imports them too, so that each
    command does not (0.1 to 0.2 s of CPU each); PIPELINE for `cachetool run` of a script that
    imports `datasets` (which imports them all). Never for a command that runs otherwise with
    one of them loaded: a listing, or anything that fingerprints (`cachetool.fingerprint`)."""
    if not (_is_cli(args) or _is_script(args)):
        raise ValueError(f"not a `python -m cachetool` or `python SCRIPT.py` command line: {args!r}")
    if not available():
        return subprocess.run(
            list(args), env=env, cwd=cwd, input=input, stdin=stdin, stdout=stdout, stderr=stderr,
            capture_output=capture_output, text=text, encoding=encoding, errors=errors,
            timeout=timeout, check=check,
        )  # fmt: skip
    if capture_output:
        stdout = stderr = subprocess.PIPE
    text_mode = bool(text or encoding or errors)
    coding = (encoding or locale.getpreferredencoding(False), errors or "strict")
    if input is not None:
        stdin = subprocess.PIPE
        if isinstance(input, str):
            input = input.encode(*coding)
    proc = ForkedProcess(args, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, preload=preload)
    try:
        out, err = proc.communicate(input, timeout)
    except BaseException:  # a timeout too: as `subprocess.run`, kill and wait, never read on
        proc.kill()  # (a process the command started may hold its pipes open)
        try:
            proc.wait(30)
        except (subprocess.TimeoutExpired, ZygoteDied):
            pass
        proc.close_pipes()
        raise
    if text_mode:
        out, err = _decode(out, *coding), _decode(err, *coding)  # type: ignore[assignment]
    done = subprocess.CompletedProcess(list(args), proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


# ---------------------------------------------------------------------------------------------
# The zygote's side


class _Recording(MutableMapping[str, str]):
    """`os.environ` while the zygote imports: notes every name read."""

    def __init__(self, environ: MutableMapping[str, str], read: set[str]) -> None:
        self.environ, self.read = environ, read

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self.environ[key]

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return key in self.environ

    def __setitem__(self, key: str, value: str) -> None:
        self.environ[key] = value

    def __delitem__(self, key: str) -> None:
        del self.environ[key]

    def __iter__(self) -> Iterator[str]:
        self.read.add("*")  # the whole environment
        return iter(self.environ)

    def __len__(self) -> int:
        self.read.add("*")
        return len(self.environ)

    def copy(self) -> dict[str, str]:
        self.read.add("*")
        return dict(self.environ)


def _import_warm(preload: Sequence[str] = ()) -> tuple[set[str], str | None]:
    """Import WARM, then `preload`, noting the variables read and whether the working directory
    was asked. WARM may load no module of HEAVY."""
    import importlib

    read: set[str] = set()
    cwd_asked: list[str] = []
    environ, getcwd = os.environ, os.getcwd

    def noted_getcwd() -> str:
        cwd_asked.append("os.getcwd()")
        return getcwd()

    os.environ = _Recording(environ, read)  # type: ignore[assignment]  # noqa: B003 (read only)
    os.getcwd = noted_getcwd
    try:
        for name in WARM:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as e:
                # A module (or its package) renamed or merged away: the children import what it
                # became (slower, never wrong). A missing import inside a module still fails.
                if not (e.name and f"{name}.".startswith(f"{e.name}.")):
                    raise
        heavy = [m for m in HEAVY if m in sys.modules]
        for name in preload:
            importlib.import_module(name)
    finally:
        os.environ, os.getcwd = environ, getcwd
    refused = None
    if "*" in read:
        refused = "an import reads the whole environment"
    elif cwd_asked:
        refused = "an import reads the working directory"
    elif heavy:
        refused = f"the CLI's imports load {', '.join(heavy)}"
    return read, refused


def serve(fd: int, preload: Sequence[str] = ()) -> None:
    """The zygote: import the CLI (and `preload`), then fork a child per command line read on
    `fd` until its end; write each child's pid, then its status, on the command's status pipe."""
    sys.path.pop(0)  # `-c` put the working directory first; each child puts its own there
    atexit.unregister(close_all)  # the caller's, not a child's
    sock = socket.socket(fileno=fd)
    read, refused = _import_warm(preload)
    sys.modules.pop("__main__").__dict__.clear()  # the `-c` code: each child gets a fresh one
    sys.modules["__main__"] = type(sys)("__main__")
    # What the imports made is never garbage: out of the collector's reach, a child's collections
    # neither walk it nor write to its pages (each write copies a page the zygote shares with it).
    gc.freeze()
    hello: dict[str, Any] = {"read": sorted(read), "pid": os.getpid()}
    if refused:
        hello["refused"] = refused
    sock.send(json.dumps(hello).encode())
    if refused:
        os._exit(1)
    children: dict[int, tuple[int, int]] = {}  # pidfd: (pid, status pipe)
    while True:
        ready, _, _ = select.select([sock, *children], [], [])
        for fd in ready:
            if fd is sock:
                _take(sock, children)
            else:
                pid, status_w = children.pop(fd)
                _, status, usage = os.wait4(pid, 0)
                os.close(fd)
                try:
                    os.write(status_w, f"{status} {usage.ru_utime + usage.ru_stime}\n".encode())
                except OSError:
                    pass  # the caller stopped listening
                os.close(status_w)


def _take(sock: socket.socket, children: dict[int, tuple[int, int]]) -> None:
    """Read one command line (or the end) from `sock` and fork its child."""
    try:
        message, fds, _, _ = socket.recv_fds(sock, 1 << 22, 4)
    except OSError:
        message, fds = b"", []
    if not message:  # the caller ended: what still runs is killed, everything reaped
        for pid, _ in children.values():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os._exit(0)
    request = json.loads(message)
    *std, status_w = fds
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        sock.close()
        for pidfd, (_, w) in children.items():
            os.close(pidfd)
            os.close(w)
        os.close(status_w)
        _child(request, std)  # never returns
    for f in std:
        os.close(f)
    os.write(status_w, f"{pid}\n".encode())
    children[os.pidfd_open(pid)] = (pid, status_w)


def _stdio(fd: int, name: str, like: io.TextIOWrapper, buffered: bool) -> io.TextIOWrapper:
    """A standard stream on `fd` as the interpreter makes it at start (`create_stdio`): the
    zygote's encoding and errors (they come from the variables the zygote shares with the
    child); unless unbuffered (`-u`, PYTHONUNBUFFERED) line buffered on a terminal, stderr
    always; named `<stdout>` and so on."""
    write = name != "<stdin>"
    buffering = -1 if buffered or not write else 0
    buffer = open(fd, "wb" if write else "rb", buffering=buffering, closefd=False)  # noqa: SIM115
    raw = buffer if isinstance(buffer, io.FileIO) else buffer.raw  # type: ignore[attr-defined]
    raw.name = name
    stream = io.TextIOWrapper(
        buffer,  # type: ignore[arg-type]
        encoding=like.encoding,
        errors=like.errors,
        newline="\n",
        line_buffering=buffered and (raw.isatty() or name == "<stderr>"),
        write_through=not buffered,
    )
    stream.mode = "w" if write else "r"  # type: ignore[misc]
    return stream


def _child(request: dict[str, Any], std: list[int]) -> None:
    """In the forked child: become a fresh `python -m cachetool ARGV` and run it."""
    try:
        for target, fd in enumerate(std):
            os.dup2(fd, target)
        for fd in set(std):
            if fd > 2:
                os.close(fd)
        if request["new_session"]:
            os.setsid()
        signal.signal(
            signal.SIGINT, signal.SIG_IGN if request["sigint_ignored"] else signal.default_int_handler
        )
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        like = (sys.__stdin__, sys.__stdout__, sys.__stderr__)
        names = ("<stdin>", "<stdout>", "<stderr>")
        buffered = not sys.__stdout__.write_through  # type: ignore[union-attr]
        sys.stdin, sys.stdout, sys.stderr = (
            _stdio(i, n, s, buffered)  # type: ignore[arg-type]
            for i, (n, s) in enumerate(zip(names, like, strict=True))
        )
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr  # type: ignore[misc]
        if request.get("script"):  # `python SCRIPT ARGS` (its folder first on the path), `-c CODE`
            code = request["argv"][0] == "-c"
            sys.argv = ["-c", *request["argv"][2:]] if code else list(request["argv"])
            sys.orig_argv = [sys.executable, *request["argv"]]
            sys.path.insert(0, "" if code else os.path.dirname(os.path.abspath(request["argv"][0])))
        else:
            sys.argv = ["-m", *request["argv"]]
            sys.orig_argv = [sys.executable, "-m", "cachetool", *request["argv"]]
            sys.path.insert(0, request["cwd"])
        sys.modules.pop("_cachetool_zygote", None)
        if "numpy.random" in sys.modules:  # a fresh interpreter seeds it from the OS at import
            sys.modules["numpy.random"].seed()
        import builtins
        import runpy

        sys.modules["__main__"].__dict__.update(__builtins__=builtins, __annotations__={})
    except BaseException:  # the child could not become the command: say so on its stderr
        import traceback

        os.write(2, f"forks: setting up the child failed:\n{traceback.format_exc()}".encode())
        os._exit(125)
    os._exit(_main(runpy, request["argv"] if request.get("script") else None))


def _run_script(argv: Sequence[str]) -> None:
    """Run the script `argv[0]` (`-c CODE`: the code `argv[1]`) in `__main__`, as `python` does."""
    main = sys.modules["__main__"]
    main.__dict__.update(__name__="__main__", __cached__=None, __spec__=None)
    if argv[0] == "-c":
        code = compile(argv[1], "<string>", "exec")
    else:
        main.__dict__["__file__"] = argv[0]
        with open(argv[0], "rb") as f:
            code = compile(f.read(), argv[0], "exec")
    exec(code, main.__dict__)


def _main(runpy: Any, script: Sequence[str] | None = None) -> int:
    """Run `-m cachetool` (or the `script` command line, see `_run_script`) and end as the
    interpreter does (`Py_RunMain`, `Py_FinalizeEx`)."""
    code = 0
    try:
        if script is not None:
            _run_script(script)
        else:
            runpy._run_module_as_main("cachetool")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            try:
                print(e.code, file=sys.stderr)
            except Exception:
                pass
            code = 1
    except BaseException as e:
        # the traceback starts where a cold one does: in runpy, not in this function
        tb = e.__traceback__.tb_next if e.__traceback__ else None
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        code = -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
    threading._shutdown()  # type: ignore[attr-defined]  # waits for non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception as e:
            if stream is sys.stdout:
                code = 120
                try:
                    sys.stderr.write(f"Exception ignored in: {stream!r}\n{type(e).__name__}: {e}\n")
                    sys.stderr.flush()
                except Exception:
                    pass
    if code == -signal.SIGINT:  # as the interpreter: die of the SIGINT, for the shell to see
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code
