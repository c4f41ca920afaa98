"""Run a script N times in subprocesses that differ on purpose and compare their fingerprints.

Each run is ``python -m cachetool run script.py [args]`` with its own ``PYTHONHASHSEED`` and its
own events file (``CACHETOOL_TRACE_EVENTS``, with hash trees: ``CACHETOOL_TRACE_TREES=1``). By
default the runs use the cache the script would use anyway, one after the other; the first computes
every step (``CACHETOOL_TRACE_COLD=1``: caching disabled, nothing read from or written to the cache)
so that a step changing an object that a later step hashes shows even when the cache is warm
(fingerprints themselves are computed before any cache lookup). ``isolated=True`` gives each run a
fresh temporary ``HF_DATASETS_CACHE`` (removed afterwards) and runs them in parallel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachetool.determinism.analysis import Analysis, Cause, align, analyze
from cachetool.determinism.checkpoint import COLD_ENV, EVENTS_ENV, SEED_ENV, TREES_ENV
from cachetool.errors import CachetoolError, ExitCode

__all__ = [
    "DeterminismReport",
    "RunOutcome",
    "RunProgress",
    "check_determinism",
    "read_events",
    "run_command",
    "terminal_lines",
]

REPORT_VERSION = 1
_STDERR_TAIL_LINES = 20
#: Bytes of a run's stdout and stderr kept (the last ones, on disk in its run folder): a script
#: that prints gigabytes must not fill the temp dir.
OUTPUT_CAP = 1 << 20
#: Marks every process of one run (inherited through fork, exec and setsid), so the processes a
#: run leaves behind can be found and stopped even when they left its process group.
RUN_MARKER_ENV = "CACHETOOL_CHECK_RUN"
#: The temp folder of a check: `cachetool-determinism-<pid>-<random>`; `gc --temp` removes it
#: once that process is gone.
WORKDIR_PREFIX = "cachetool-determinism-"


@dataclass(frozen=True)
class RunOutcome:
    """One run of the script: how it ended and the events it recorded."""

    index: int
    hash_seed: int
    returncode: int | None
    timed_out: bool
    duration: float
    events: tuple[dict[str, Any], ...]
    stderr_tail: str
    isolated_cache: bool = False
    #: Processes of the run still alive when it ended (timeout), stopped with SIGKILL.
    stopped: int = 0
    #: Bytes the script wrote to stdout and stderr (only the last OUTPUT_CAP of each are kept).
    output_bytes: int = 0
    #: A cold run: every transform computed (caching disabled), nothing loaded from the cache.
    cold: bool = False

    @property
    def failed(self) -> bool:
        return self.timed_out or self.returncode != 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "hash_seed": self.hash_seed,
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration, 3),
            "events": len(self.events),
            "isolated_cache": self.isolated_cache,
            "cold": self.cold,
            "stderr_tail": self.stderr_tail if self.failed else None,
            "stopped_processes": self.stopped,
            "output_bytes": self.output_bytes,
        }


@dataclass(frozen=True)
class RunProgress:
    """Where one run is, for a progress display: reported about twice a second while it runs."""

    index: int
    hash_seed: int
    cold: bool
    steps: int
    elapsed: float
    finished: bool


@dataclass(frozen=True)
class DeterminismReport:
    """The result of `check_determinism`: runs, aligned steps, causes with culprits, the exit code."""

    script: str
    args: tuple[str, ...]
    isolated: bool
    runs: tuple[RunOutcome, ...]
    analysis: Analysis | None
    #: The extra run with the first run's hash seed, made to tell which variation causes a difference.
    rerun: RunOutcome | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failed_run(self) -> RunOutcome | None:
        """The first run that failed or timed out, if any."""
        for run in self.runs:
            if run.failed:
                return run
        return None

    @property
    def nothing_compared(self) -> str | None:
        """Why no fingerprint was compared (None when some were): not a pass."""
        if self.failed_run is not None or self.analysis is None or self.analysis.steps:
            return None
        if self.analysis.unaligned:
            return (
                f"nothing was compared: the runs took different paths ({self.analysis.unaligned} "
                "event(s) in some runs only)"
            )
        return (
            "nothing was compared: no run recorded a fingerprint (tracing was off, the script does "
            "not use datasets or cachetool.checkpoint, or it exited before its first transform)"
        )

    @property
    def exit_code(self) -> ExitCode:
        """0 every fingerprint matched; 1 one differs; 2 the script failed or nothing was
        compared; 3 only random fallbacks."""
        if self.failed_run is not None or self.analysis is None or self.nothing_compared:
            return ExitCode.USAGE
        if self.analysis.deterministic_causes:
            return ExitCode.PROBLEMS_FOUND
        if self.analysis.random_causes:
            return ExitCode.RANDOM_FINGERPRINT
        return ExitCode.OK

    @property
    def verdict(self) -> str:
        return {
            ExitCode.OK: "deterministic",
            ExitCode.PROBLEMS_FOUND: "not deterministic",
            ExitCode.USAGE: "nothing compared" if self.nothing_compared else "script failed",
            ExitCode.RANDOM_FINGERPRINT: "random fingerprint",
        }.get(self.exit_code, "unknown")

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON form (``--json``); see README, "check-determinism JSON"."""
        analysis = self.analysis
        return {
            "version": REPORT_VERSION,
            "script": self.script,
            "args": list(self.args),
            "exit_code": int(self.exit_code),
            "verdict": self.verdict,
            "variations": {
                "hash_seeds": [r.hash_seed for r in self.runs],
                "isolated_cache": self.isolated,
            },
            "runs": [r.to_dict() for r in self.runs],
            "rerun": self.rerun.to_dict() if self.rerun is not None else None,
            "transforms": [s.to_dict() for s in analysis.steps] if analysis else [],
            "unaligned_events": analysis.unaligned if analysis else 0,
            "differences": [c.to_dict() for c in analysis.deterministic_causes] if analysis else [],
            "random_fingerprints": [c.to_dict() for c in analysis.random_causes] if analysis else [],
            "masked_differences": [c.to_dict() for c in analysis.masked] if analysis else [],
            "warnings": list(self.warnings),
            "nothing_compared": self.nothing_compared,
        }


def run_command(script: str, args: Sequence[str], launcher: Sequence[str] | None = None) -> list[str]:
    """The command line of one run: the script under cachetool's tracing (what
    ``python -m cachetool run script.py args`` executes, without the CLI hop), or
    ``[*launcher, script, *args]`` when a launcher is given."""
    if launcher is not None:
        return [*launcher, script, *args]
    try:
        from cachetool.trace.runner import command
    except ImportError:
        return [sys.executable, "-m", "cachetool", "run", script, *args]
    return command(script, list(args))


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of one run, in file order; a torn last line (a killed run) is skipped."""
    events: list[dict[str, Any]] = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return events
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    # Tracer and checkpoint events share one sequence; writers may buffer differently.
    if all(isinstance(e.get("seq"), int) for e in events):
        events.sort(key=lambda e: e["seq"])
    return events


class _Tail:
    """Drains a pipe on a thread, keeping only its last `cap` bytes (and the total count)."""

    def __init__(self, fd: int, cap: int = OUTPUT_CAP) -> None:
        import threading

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


def _tail_lines(data: bytes, lines: int = _STDERR_TAIL_LINES) -> str:
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
        if needle in env + b"\0" or env.startswith(needle):
            out.append(int(name))
    return out


def stop_marked(marker: str, rounds: int = 5) -> int:
    """SIGKILL every process carrying `marker`, again until none is left (one may fork while
    the others are stopped). Returns how many were stopped."""
    import signal

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


def _run_once(
    index: int,
    script: Path,
    args: Sequence[str],
    hash_seed: int,
    workdir: Path,
    *,
    timeout: float | None,
    isolated: bool,
    launcher: Sequence[str] | None,
    cwd: Path,
    env: Mapping[str, str],
    live: dict[subprocess.Popen[bytes], str] | None = None,
    cold: bool = False,
) -> RunOutcome:
    run_dir = workdir / f"run-{index}"
    run_dir.mkdir(parents=True, exist_ok=True)
    events_path = run_dir / "events.jsonl"
    run_env = dict(env)
    run_env[SEED_ENV] = env.get("PYTHONHASHSEED", "")  # the script gets the user's own back
    run_env["PYTHONHASHSEED"] = str(hash_seed)
    run_env[EVENTS_ENV] = str(events_path)
    run_env[TREES_ENV] = "1"
    if cold:
        run_env[COLD_ENV] = "1"
    if isolated:
        cache = run_dir / "hf-datasets-cache"
        cache.mkdir()
        run_env["HF_DATASETS_CACHE"] = str(cache)
    marker = f"{os.getpid()}-{index}-{os.urandom(6).hex()}"
    run_env[RUN_MARKER_ENV] = marker
    start = time.monotonic()
    timed_out = False
    returncode: int | None
    stopped = 0
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = subprocess.Popen(
            run_command(str(script), args, launcher),
            cwd=cwd,
            env=run_env,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            start_new_session=True,
        )
    finally:
        os.close(out_w)
        os.close(err_w)
    out_tail, err_tail = _Tail(out_r), _Tail(err_r)
    if live is not None:
        live[proc] = marker
    try:
        returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        stopped = 1 + stop_marked(marker)
        returncode = None
    except BaseException:
        _kill_group(proc)
        stop_marked(marker)
        raise
    finally:
        if live is not None:
            live.pop(proc, None)
    duration = time.monotonic() - start
    out_tail.finish(run_dir / "stdout.txt")
    err = err_tail.finish(run_dir / "stderr.txt")
    outcome = RunOutcome(
        index=index,
        hash_seed=hash_seed,
        returncode=returncode,
        timed_out=timed_out,
        duration=duration,
        events=tuple(read_events(events_path)),
        stderr_tail=_tail_lines(err),
        isolated_cache=isolated,
        stopped=stopped,
        output_bytes=out_tail.total + err_tail.total,
        cold=cold,
    )
    if isolated:
        shutil.rmtree(run_dir / "hf-datasets-cache", ignore_errors=True)
    return outcome


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the run and anything it started (a num_proc pool): it runs in its own session."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


class BadScript(CachetoolError):
    """The script to check does not exist."""

    def __init__(self, script: Path) -> None:
        super().__init__(f"script not found: {script}")
        self.script = script


def check_determinism(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    runs: int = 2,
    hash_seeds: Sequence[int] | None = None,
    timeout: float | None = 900.0,
    isolated: bool = False,
    jobs: int | None = None,
    rerun: bool = True,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    launcher: Sequence[str] | None = None,
    progress: Callable[[RunProgress], None] | None = None,
    cold: bool = True,
) -> DeterminismReport:
    """Run `script` `runs` times with distinct hash seeds, compare every fingerprint, explain the first.

    `hash_seeds` fixes the seeds (its length sets the number of runs); the default is ``1..runs``, so
    a verdict is reproducible. `isolated` gives each run a fresh temporary cache and runs up to
    `jobs` of them at once (default: as many as there are runs and cores). When a difference is
    found and `rerun` is true, one more run with the first run's seed tells whether the difference
    depends on ``PYTHONHASHSEED`` or changes on every run. `launcher` replaces the traced
    interpreter (``[sys.executable]`` runs the script plainly: only `cachetool.checkpoint` events).
    `progress` is called about twice a second per running run (the steps it recorded so far) and
    once when it ends. With `cold` (the default) the first run of a shared cache computes every
    step (caching off for it), so a step whose function changes what a later step hashes shows
    even on a warm cache; ``cold=False`` saves that recomputation.

    Mirrors ``cachetool check-determinism`` (``--runs``, ``--hash-seeds``, ``--timeout``,
    ``--isolated``, ``--jobs``, ``--no-cold``).
    """
    script_path = Path(script)
    if not (script_path.is_file() or (script_path / "__main__.py").is_file()):
        raise BadScript(script_path)  # a file, or a folder with __main__.py, as `cachetool run`
    if timeout is not None and not timeout >= 0:  # also NaN
        raise CachetoolError(f"invalid --timeout {timeout:g}: give seconds >= 0 (0: no limit)")
    timeout = timeout or None
    seeds = list(hash_seeds) if hash_seeds else list(range(1, runs + 1))
    if len(seeds) < 2:
        raise CachetoolError("need at least 2 runs to compare (--runs 2 or --hash-seeds 1,2)")
    if any(not 0 <= s <= 4294967295 for s in seeds):
        raise CachetoolError("hash seeds must be integers from 0 to 4294967295")
    work_cwd = Path(cwd) if cwd is not None else Path.cwd()
    # As the user typed it (sys.argv[0] of a plain run), unless the runs start somewhere else.
    run_script = script_path if cwd is None else script_path.resolve()
    run_env = dict(os.environ if env is None else env)
    workers = 1
    if isolated:
        workers = max(1, min(len(seeds), jobs or (os.cpu_count() or 1)))

    # Runs start in their own sessions (a timeout stops a whole num_proc pool), so Ctrl-C does not
    # reach them: every live run is stopped here when this process is interrupted or terminated,
    # and what the runs left (their temp folder, tmp files in the cache) is removed.
    live: dict[subprocess.Popen[bytes], str] = {}
    cache_root = None if isolated else _cache_root(run_env)
    leftovers = _Leftovers(cache_root, run_env)
    started = time.time()
    with (
        _terminate_as_interrupt(),
        tempfile.TemporaryDirectory(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-") as tmp,
    ):
        workdir = Path(tmp)

        def one(index: int, seed: int) -> RunOutcome:
            # On the user's cache, the first run computes every step (caching disabled, its files go
            # to a temporary folder) and the next ones use the cache as it is: a step whose result
            # depends on whether an earlier one was computed or loaded shows even on a warm cache.
            # Isolated runs start from empty caches: they compute everything anyway.
            first_cold = cold and not isolated and index == 0
            with _watching(progress, workdir / f"run-{index}" / "events.jsonl", index, seed, first_cold):
                return _run_once(
                    index,
                    run_script,
                    args,
                    seed,
                    workdir,
                    timeout=timeout,
                    isolated=isolated,
                    launcher=launcher,
                    cwd=work_cwd,
                    env=run_env,
                    live=live,
                    cold=first_cold,
                )

        outcomes: list[RunOutcome] = []
        try:
            if workers == 1:
                for i, seed in enumerate(seeds):
                    outcome = one(i, seed)
                    outcomes.append(outcome)
                    if outcome.failed:
                        break  # no point running the others: the report is about the failure
            else:
                pool = ThreadPoolExecutor(max_workers=workers)
                try:
                    outcomes = list(pool.map(one, range(len(seeds)), seeds))
                finally:
                    for proc, marker in list(live.items()):
                        _kill_group(proc)
                        stop_marked(marker)
                    pool.shutdown(wait=True, cancel_futures=True)
        except BaseException as e:
            removed = leftovers.remove(started, workdir)
            raise CheckInterrupted(e, removed, workdir) from None
        cleanup: list[str] = []
        if any(o.timed_out for o in outcomes):
            removed = leftovers.remove(started, workdir)
            stopped = sum(o.stopped for o in outcomes)
            cleanup.append(
                f"stopped {stopped} process(es) of the run that timed out"
                + (f"; removed what it left: {removed}" if removed else "")
                + f"; its temp folder {workdir} is removed"
            )
        capped = [o for o in outcomes if o.output_bytes > 2 * OUTPUT_CAP]
        if capped:
            cleanup.append(
                f"the script wrote {max(o.output_bytes for o in capped):,} bytes of output in a run; "
                f"only the last {OUTPUT_CAP:,} of stdout and of stderr were kept"
            )
        report = DeterminismReport(
            script=str(script),
            args=tuple(args),
            isolated=isolated,
            runs=tuple(outcomes),
            analysis=None,
            warnings=tuple(cleanup),
        )
        if report.failed_run is not None:
            return report
        analysis = analyze([o.events for o in outcomes])
        warnings: list[str] = list(cleanup)
        # A cold run's internal calls inside the steps it computed are not another path.
        apart = analysis.unaligned - analysis.unaligned_internal
        if apart:
            warnings.append(
                f"{apart} event(s) happened in some runs only (the runs took different "
                "paths); they were not compared"
            )
        extra: RunOutcome | None = None
        if rerun and analysis.deterministic_causes:
            extra = one(len(seeds), seeds[0])
            if extra.failed:
                warnings.append("the extra run with an equal hash seed failed; variation not determined")
            else:
                analysis = _with_variation(analysis, outcomes[0], extra)
        report = DeterminismReport(
            script=str(script),
            args=tuple(args),
            isolated=isolated,
            runs=tuple(outcomes),
            analysis=analysis,
            rerun=extra,
            warnings=tuple(warnings),
        )
        if report.nothing_compared is not None:
            # The script's own warnings say why (tracing off, an early exit): show them.
            said = outcomes[0].stderr_tail.strip()
            extra_lines = [f"run 1 wrote on stderr:\n{said}"] if said else []
            report = dataclasses.replace(report, warnings=(*warnings, report.nothing_compared, *extra_lines))
        return report


class CheckInterrupted(CachetoolError):
    """The check was interrupted (Ctrl-C) or terminated (SIGTERM): its runs were stopped and what
    they left was removed; the message says what."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, cause: BaseException, removed: str, workdir: Path) -> None:
        what = "terminated" if isinstance(cause, _Terminated) else "interrupted"
        parts = [f"check-determinism {what}: stopped the running script"]
        if removed:
            parts.append(f"removed what its runs left: {removed}")
        parts.append(f"removed its temp folder {workdir}")
        super().__init__("; ".join(parts))
        self.cause = cause


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that cleanup runs as for Ctrl-C."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise _Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _cache_root(env: Mapping[str, str]) -> Path:
    from cachetool.cache.dirs import resolve_cache_root

    return resolve_cache_root(None, environ=env).path.expanduser()


class _Leftovers:
    """What stopped runs leave: `tmp*` files in the user's cache, `hf_datasets-*` and `pymp-*`
    folders in the temp dir (a cold run writes to an `hf_datasets-*` folder). Only what the check
    made is removed: cache files written since it started, temp folders that were not there
    before it; each through gc's own checks (not open, not mapped, not owned by a live process)."""

    def __init__(self, cache_root: Path | None, env: Mapping[str, str]) -> None:
        from cachetool.cache.dirs import temp_dir

        self.cache_root = cache_root
        self.temp = temp_dir(env).path
        self.before = self._temp_folders()

    def _temp_folders(self) -> set[str]:
        from cachetool.cache.layout import temp_folder_kind

        try:
            return {n for n in os.listdir(self.temp) if temp_folder_kind(n) in ("hf_datasets", "pymp")}
        except OSError:
            return set()

    def remove(self, since: float, workdir: Path) -> str:
        """Remove them; returns what went, in words ("" when nothing)."""
        try:
            from dataclasses import replace

            from cachetool.cache.layout import Kind
            from cachetool.maintenance.gc import GcOptions, execute, plan_gc

            root = self.cache_root if self.cache_root is not None and self.cache_root.is_dir() else workdir
            plan = plan_gc(root, GcOptions(temp=True, min_age=0.0, tmp_dir=self.temp))
            new_temp = self._temp_folders() - self.before
            mine = tuple(
                i
                for i in plan.items
                if (
                    i.scope == "root"
                    and root != workdir
                    and i.kind == Kind.TEMP
                    and all(t.mtime is not None and t.mtime >= since - 1 for t in i.targets)
                )
                or (i.scope == "temp" and i.path.name in new_temp)
            )
            if not mine:
                return ""
            result = execute(replace(plan, items=mine), log=False)
        except Exception:  # cleanup must never hide the report; gc --temp removes them later
            return ""
        files = sum(1 for o in result.removed if o.item.scope == "root")
        folders = sum(1 for o in result.removed if o.item.scope == "temp")
        words = []
        if files:
            words.append(f"{files} tmp file(s) in {self.cache_root}")
        if folders:
            words.append(f"{folders} temp folder(s) in {self.temp}")
        return " and ".join(words)


class _watching:
    """While a run goes, report its progress (the lines of its events file) from a thread."""

    def __init__(
        self, progress: Callable[[RunProgress], None] | None, events: Path, index: int, seed: int, cold: bool
    ) -> None:
        self.progress = progress
        self.events = events
        self.index, self.seed, self.cold = index, seed, cold
        self.stop = threading.Event()
        self.start = time.monotonic()
        self.thread: threading.Thread | None = None

    def report(self, finished: bool) -> None:
        if self.progress is None:
            return
        try:
            steps = self.events.read_bytes().count(b"\n")
        except OSError:
            steps = 0
        try:
            self.progress(
                RunProgress(self.index, self.seed, self.cold, steps, time.monotonic() - self.start, finished)
            )
        except Exception:  # a display problem never stops the check
            self.progress = None

    def __enter__(self) -> _watching:
        if self.progress is not None:

            def loop() -> None:
                while not self.stop.wait(0.5):
                    self.report(False)

            self.thread = threading.Thread(target=loop, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            self.report(True)


def _with_variation(analysis: Analysis, first: RunOutcome, extra: RunOutcome) -> Analysis:
    """Mark each cause ``PYTHONHASHSEED`` when the equal-seed run reproduces the first run's
    fingerprint there, else ``every run``."""
    from dataclasses import replace

    rows, _ = align([first.events, extra.events])
    twin_of = {row[0]: row[1] for row in rows}
    causes: list[Cause] = []
    for cause in analysis.causes:
        position = cause.step.positions[0]
        if cause.kind in ("random", "cache-state") or position not in twin_of:
            causes.append(cause)
            continue
        same = extra.events[twin_of[position]].get("result") == first.events[position].get("result")
        causes.append(replace(cause, variation="PYTHONHASHSEED" if same else "every run"))
    return replace(analysis, causes=tuple(causes))
