"""One run of the script, from start to outcome: its folder, environment, processes (found and
stopped through a marker in their environment), capped output, progress. A run's interpreter
starts ahead of its turn (`waiter`), importing `datasets` while the previous run works.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.determinism.waiter import GO, GO_FD_ENV, PREIMPORT_ENV
from cachetool.processes import process_start
from cachetool.trace.install import COLD_ENV, EVENTS_ENV, RUN_MARKER_ENV, SEED_ENV, TREES_ENV

if TYPE_CHECKING:  # imported when a run ends: the runs start before the comparison's imports
    from cachetool.determinism.verdict import RunOutcome, RunProgress

_STDERR_TAIL_LINES = 20
#: Bytes of a run's stdout and stderr kept (the last ones): a script that prints gigabytes must not
#: fill the memory.
OUTPUT_CAP = 1 << 20


class Tail:
    """Drains a pipe on a thread, keeping only its last `cap` bytes (and the total count)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
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
            if len(self.buf) > 2 * OUTPUT_CAP:
                del self.buf[: len(self.buf) - OUTPUT_CAP]

    def finish(self, timeout: float = 2.0) -> bytes:
        """The kept tail, once the stream ends or after `timeout` (a process that outlived the run
        may hold the pipe)."""
        self.thread.join(timeout)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.thread.join(1.0)
        return bytes(self.buf[-OUTPUT_CAP:])


def marked_pids(marker: str) -> list[int]:
    """Pids of this user's processes whose environment holds the run marker `marker`."""
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
    """SIGKILL every process carrying `marker`, again until none is left (one may fork meanwhile).
    Returns how many were stopped."""
    stopped: set[int] = set()
    for _ in range(rounds):
        pids = [p for p in marked_pids(marker) if process_start(p) is not None]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                stopped.add(pid)
        time.sleep(0.05)
    return len(stopped)


_PROGRESS_BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\|\s*\d+/\d+ \[|[0-9.?]+ ?(it|examples|ba|B)/s\]")


def terminal_lines(text: str) -> list[str]:
    """The lines of a script's stderr as a terminal last showed them (what follows each line's last
    ``\\r``), without progress-bar lines (``Map: 100%|████| 4/4 [00:00<00:00, 248 examples/s]``)."""
    out = []
    for raw in text.split("\n"):
        line = raw.rstrip("\r").rsplit("\r", 1)[-1]
        if line.strip() and not _PROGRESS_BAR.search(line):
            out.append(line)
    return out


def wait_exit(proc: subprocess.Popen[bytes], timeout: float | None) -> int:
    """`proc.wait(timeout)`, woken by the exit itself through a pidfd (`Popen.wait` polls every 50 ms)."""
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


_BOOTSTRAP = ("-m", "cachetool.trace.bootstrap")
_WAITER = ("-m", "cachetool.determinism.waiter")
#: Words in a script's source that may set the environment `datasets` reads at import: then it is
#: not imported ahead of the script.
_SETS_ENVIRONMENT = ("environ", "putenv", "dotenv")


def _waiting_command(command: list[str]) -> list[str] | None:
    """`command` with the bootstrap module replaced by the waiter (which runs it on its turn); None
    when it does not start the bootstrap as a module (a launcher): then it starts on its turn."""
    for i in range(len(command) - 1):
        if tuple(command[i : i + 2]) == _BOOTSTRAP:
            return [*command[:i], *_WAITER, *command[i + 2 :]]
    return None


def _may_preimport(script: Path) -> bool:
    """The script uses `datasets` and sets no environment variable (read at import) itself."""
    source = script / "__main__.py" if script.is_dir() else script
    try:
        text = source.read_text(errors="replace")
    except OSError:
        return False
    return "datasets" in text and not any(word in text for word in _SETS_ENVIRONMENT)


@dataclass(frozen=True)
class RunSettings:
    """What every run of one check shares."""

    script: Path
    args: tuple[str, ...]
    timeout: float | None
    isolated: bool
    cold: bool
    cwd: Path
    env: Mapping[str, str]
    launcher: Sequence[str] | None
    progress: Callable[[RunProgress], None] | None
    workdir: Path
    #: Isolated runs one after another: each gets a fresh cache at one and the same path (a dataset
    #: an object holds pickles with its files' paths: two cache folders would differ by that alone).
    one_path: bool = False

    @property
    def shared_cache(self) -> Path:
        """Where every isolated run's cache is while it runs (`one_path`)."""
        return self.workdir / "hf-datasets-cache"


class Run:
    """One run of the script: `start` (ahead of its turn when possible), `go`, `finish`; `abort`
    stops whatever it started and has not finished."""

    def __init__(self, s: RunSettings, index: int, seed: int, cache_of: Run | None = None) -> None:
        self.s, self.index, self.seed = s, index, seed
        #: Isolated runs: the run whose cache this one uses as it found it (it loads what that one
        #: computed), instead of a fresh one.
        self.cache_of = cache_of
        # On the user's cache the first run computes every step, so that a step depending on whether
        # an earlier one was computed or loaded shows on a warm cache (isolated caches start empty).
        self.cold = s.cold and not s.isolated and index == 0
        self.dir = s.workdir / f"run-{index}"
        self.events = self.dir / "events.jsonl"
        self.marker = f"{os.getpid()}-{index}-{os.urandom(6).hex()}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.go_fd: int | None = None
        self.tails: tuple[Tail, Tail] | None = None
        self.went: float | None = None
        #: Reports the run's progress while it goes (`_watch`); a display problem sets it to None.
        self.progress = s.progress
        self.watch: threading.Thread | None = None
        self.unwatched = threading.Event()
        self.done = False
        #: `abort` stopped the script while it ran (not only an interpreter waiting for its turn).
        self.stopped_early = False

    @property
    def cache(self) -> Path:
        """Isolated runs: this run's own cache."""
        return self.dir / "hf-datasets-cache"

    @property
    def started(self) -> bool:
        return self.proc is not None

    @property
    def going(self) -> bool:
        return self.went is not None

    def _env(self) -> dict[str, str]:
        env = dict(self.s.env)
        env[SEED_ENV] = env.get("PYTHONHASHSEED", "")  # the script gets the user's own back
        env["PYTHONHASHSEED"] = str(self.seed)
        env[EVENTS_ENV] = str(self.events)
        env[TREES_ENV] = "1"
        if self.cold:
            env[COLD_ENV] = "1"
        if self.s.one_path:
            env["HF_DATASETS_CACHE"] = str(self.s.shared_cache)  # put in place on its turn (`go`)
        elif self.s.isolated:
            if self.cache_of is not None:
                env["HF_DATASETS_CACHE"] = str(self.cache_of.cache)
            else:
                self.cache.mkdir()
                env["HF_DATASETS_CACHE"] = str(self.cache)
        env[RUN_MARKER_ENV] = self.marker
        return env

    def start(self) -> None:
        """Start the interpreter; unless it can wait for its turn, the script starts now too."""
        if self.started:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        env = self._env()
        # The script traced as by ``cachetool run``, or under the launcher.
        if self.s.launcher is not None:
            command = [*self.s.launcher, str(self.s.script), *self.s.args]
        else:
            from cachetool.trace.runner import command as traced

            command = traced(str(self.s.script), list(self.s.args))
        waiting = _waiting_command(command)
        pass_fds: tuple[int, ...] = ()
        if waiting is not None:
            go_r, self.go_fd = os.pipe()
            env[GO_FD_ENV] = str(go_r)
            env[PREIMPORT_ENV] = "1" if _may_preimport(self.s.script) else ""
            command, pass_fds = waiting, (go_r,)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                command,
                cwd=self.s.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,
                pass_fds=pass_fds,
            )
        except BaseException:
            for fd in (out_r, err_r, *((self.go_fd,) if self.go_fd is not None else ())):
                os.close(fd)
            self.go_fd = None
            raise
        finally:
            for fd in (out_w, err_w, *pass_fds):  # the child's ends
                os.close(fd)
        self.tails = (Tail(out_r), Tail(err_r))
        if self.go_fd is None:
            self._went()

    def go(self) -> None:
        """Its turn: the waiting interpreter runs the script (started now when not yet started)."""
        if self.s.one_path and not self.going:
            # Its cache goes where every run's is: the cache of the run it loads from, or a new one.
            if self.cache_of is not None:
                os.rename(self.cache_of.cache, self.s.shared_cache)
            else:
                self.s.shared_cache.mkdir()
        if not self.started:
            self.start()
        if self.go_fd is not None:
            with contextlib.suppress(OSError):  # it died waiting: `finish` says how
                os.write(self.go_fd, GO)
            os.close(self.go_fd)
            self.go_fd = None
            self._went()

    def _went(self) -> None:
        self.went = time.monotonic()
        if self.progress is not None:
            self.watch = threading.Thread(target=self._watch, daemon=True)
            self.watch.start()

    def _watch(self) -> None:
        while not self.unwatched.wait(0.5):
            self._report(False)

    def _report(self, finished: bool) -> None:
        """Where the run is (the lines of its events file), to `progress`."""
        from cachetool.determinism.verdict import RunProgress

        if self.progress is None or self.went is None:
            return
        try:
            steps = self.events.read_bytes().count(b"\n")
        except OSError:
            steps = 0
        try:
            elapsed = time.monotonic() - self.went
            self.progress(RunProgress(self.index, self.seed, self.cold, steps, elapsed, finished))
        except Exception:  # a display problem never stops the check
            self.progress = None

    def _unwatch(self, report: bool = True) -> None:
        self.unwatched.set()
        if self.watch is not None:
            self.watch.join()
            self.watch = None
            if report:
                self._report(True)

    def finish(self) -> RunOutcome:
        """Wait for the end of the run (stopping it and what it started after `timeout`)."""
        self.go()
        assert self.proc is not None and self.tails is not None and self.went is not None
        proc, (out_tail, err_tail) = self.proc, self.tails
        timed_out, stopped = False, 0
        returncode: int | None
        try:
            left = None if self.s.timeout is None else max(0.0, self.went + self.s.timeout - time.monotonic())
            returncode = wait_exit(proc, left)
        except subprocess.TimeoutExpired:
            timed_out, stopped, returncode = True, 1 + self._stop(), None
        except BaseException:
            self._stop()
            raise
        finally:
            self.done = True
            self._unwatch()
        duration = time.monotonic() - self.went
        out_tail.finish()
        err = err_tail.finish()
        from cachetool.determinism.verdict import RunOutcome, load_events

        read = load_events(self.events)
        if self.s.one_path:
            if self.index == 0:  # kept aside for the run that loads what it computed
                os.rename(self.s.shared_cache, self.cache)
            else:
                shutil.rmtree(self.s.shared_cache, ignore_errors=True)
        elif self.s.isolated and self.index != 0 and self.cache_of is None:
            shutil.rmtree(self.cache, ignore_errors=True)
        return RunOutcome(
            index=self.index,
            hash_seed=self.seed,
            returncode=returncode,
            timed_out=timed_out,
            duration=duration,
            events=read.events,
            # The script's last real lines, as its terminal showed them (no progress-bar redraws).
            stderr_tail="\n".join(terminal_lines(err.decode(errors="replace"))[-_STDERR_TAIL_LINES:]),
            isolated_cache=self.s.isolated,
            stopped=stopped,
            output_bytes=out_tail.total + err_tail.total,
            cold=self.cold,
            event_warnings=read.warnings,
            cache_of=self.cache_of.index if self.cache_of is not None else None,
        )

    def abort(self) -> None:
        """Stop what this run started and has not finished (a waiting interpreter sees its pipe end)."""
        if self.go_fd is not None:
            os.close(self.go_fd)
            self.go_fd = None
        if self.proc is not None and not self.done:
            self.done = True
            self.stopped_early = self.going
            self._stop()
            self._unwatch(report=False)

    def _stop(self) -> int:
        """SIGKILL the run and anything it started (a num_proc pool: it runs in its own session),
        then whatever else carries its marker; returns how many of those were stopped."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        self.proc.wait()
        return stop_marked(self.marker)
