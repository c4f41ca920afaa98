"""A command run by `tests.forks` (forked from a warm parent) is what a fresh `python -m cachetool`
is: the same exit code, stdout and stderr bytes for each command line below, signals by its
pid reach it, a crash is its status, and its parent ending is a clear error. The tests that run
cachetool through `forks.run` rely on this."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import forks
from tests.attack.races import synthesize_cache
from tests.conftest import hf_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not forks.available(), reason="no os.pidfd_open here, or CACHETOOL_TESTS_COLD=1"),
]

CLI = [sys.executable, "-m", "cachetool"]

# Each line: what a user runs (a `{...}` names a part of the golden cache): listings, `--json`
# documents, human output, model errors (`Error:` and exit 2),
# Click's usage errors, help at a set width.
LINES: list[list[str]] = [
    ["ls", "-q"],
    ["ls", "--json"],
    ["show", "{fp}", "--json"],
    ["show", "0000dead"],
    ["lineage", "{final}", "--json"],
    ["lineage", "{fp}", "--format", "dot"],
    ["explain", "{fp}", "--json"],
    ["verify", "--json"],
    ["verify"],
    ["gc", "zzzz", "--dry-run"],
    ["ls", "--jso"],
    ["show"],
    ["verify", "--help"],
    ["--version"],
    ["ls", "--cache-dir", "/nonexistent/cache"],
]


def _both(args: list[str], env: dict[str, str], cwd: Path) -> tuple[Any, Any]:
    kw: dict[str, Any] = {"env": env, "cwd": cwd, "capture_output": True, "timeout": 120}
    return forks.run([*CLI, *args], **kw), subprocess.run([*CLI, *args], **kw)


def test_a_forked_command_answers_as_a_fresh_interpreter(golden: dict[str, Any], tmp_path: Path) -> None:
    """Every line of LINES gives the same exit code, stdout and stderr (bytes) forked as from a
    fresh `python -m cachetool`; so do a traceback (CACHETOOL_DEBUG=1) and a TAB completion, and a
    variable the zygote's imports read (HOME, read by `sysconfig` at import) set otherwise."""
    env = {**golden["env"], "COLUMNS": "100"}
    fp = golden["final"][:8]
    codes = set()
    for template in LINES:
        args = [a.format(final=golden["final"], fp=fp) for a in template]
        forked, cold = _both(args, env, tmp_path)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            cold.returncode,
            cold.stdout,
            cold.stderr,
        ), args
        codes.add(cold.returncode)
    assert codes >= {0, 2}, codes  # successes and errors both compared
    debug = {**env, "CACHETOOL_DEBUG": "1"}
    forked, cold = _both(["ls", "--cache-dir", "/nonexistent/cache"], debug, tmp_path)
    assert cold.returncode == 1 and b"Traceback (most recent call last)" in cold.stderr
    assert (forked.returncode, forked.stdout, forked.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    tab = {**env, "_CACHETOOL_COMPLETE": "complete_bash", "COMP_WORDS": "cachetool l", "COMP_CWORD": "1"}
    forked, cold = _both([], tab, tmp_path)
    assert cold.stdout.split() == [b"ls", b"lineage"]
    assert (forked.returncode, forked.stdout, forked.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    home = {k: v for k, v in env.items() if not k.startswith(("HF_", "CACHETOOL_"))}
    home["HOME"] = str(tmp_path)  # every default location under it
    forked, cold = _both(["dirs", "--json"], home, tmp_path)
    assert str(tmp_path).encode() in cold.stdout
    assert (forked.returncode, forked.stdout, forked.stderr) == (cold.returncode, cold.stdout, cold.stderr)


def test_the_child_is_a_process_of_its_own(tmp_path: Path) -> None:
    """The child has its own pid (not the zygote's, not this process's), and the same working
    directory, `sys.path[0]`, environment, argv, stdin, open descriptors and stream settings as
    a fresh `python -m cachetool`: a script run by `cachetool run SCRIPT` (which runs it in the
    process the entry started) reports them both ways."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, os, sys\n"
        "print(json.dumps({'pid': os.getpid(), 'cwd': os.getcwd(), 'path0': sys.path[0],"
        " 'env': dict(os.environ), 'argv': sys.argv, 'fds': sorted(os.listdir('/proc/self/fd')),"
        " 'stdin': sys.stdin.read(), 'streams': [(s.name, s.encoding, s.errors, s.line_buffering)"
        " for s in (sys.stdin, sys.stdout, sys.stderr)]}))\n"
    )
    env = {**hf_env(tmp_path), "ONLY_HERE": "1"}
    kw: dict[str, Any] = {"env": env, "cwd": tmp_path, "stdout": subprocess.PIPE}
    proc = forks.ForkedProcess([*CLI, "run", str(probe), "a b"], stdin=subprocess.PIPE, **kw)
    out, _ = proc.communicate(b"typed", timeout=120)
    cold = subprocess.run([*CLI, "run", str(probe), "a b"], input=b"typed", timeout=120, **kw)
    assert proc.returncode == cold.returncode == 0
    forked, fresh = json.loads(out), json.loads(cold.stdout)
    assert forked.pop("pid") == proc.pid and proc.pid not in (os.getpid(), proc.zygote.proc.pid)
    fresh.pop("pid")
    assert forked == fresh
    assert forked["cwd"] == forked["path0"] == str(tmp_path) and forked["env"]["ONLY_HERE"] == "1"
    assert forked["argv"] == [str(probe), "a b"] and forked["stdin"] == "typed"


def test_a_child_in_a_session_of_its_own_leads_its_process_group(tmp_path: Path) -> None:
    """`start_new_session=True`, as `subprocess.Popen`'s: the child leads a session and a process
    group of its own (which `os.killpg(pid)` ends with every process it started); without it, the
    child is in the zygote's."""
    probe = tmp_path / "probe.py"
    probe.write_text("import json, os\nprint(json.dumps([os.getsid(0), os.getpgid(0)]))\n")
    kw: dict[str, Any] = {"env": hf_env(tmp_path), "cwd": tmp_path, "stdout": subprocess.PIPE}
    for new_session in (True, False):
        proc = forks.ForkedProcess([*CLI, "run", str(probe)], start_new_session=new_session, **kw)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        sid, pgid = json.loads(out)
        if new_session:
            assert sid == pgid == proc.pid
        else:
            assert sid != proc.pid and pgid == os.getpgid(proc.zygote.proc.pid)


def _waiting_gc(tmp_path: Path) -> tuple[list[str], dict[str, str], int, int]:
    """A gc that asks on a terminal and waits for the answer: its command line, environment and
    the terminal (master, slave)."""
    root = tmp_path / "cache"
    synthesize_cache(root, 2)
    args = [*CLI, "gc", "--max-size", "0", "--min-age", "0", "--cache-dir", str(root)]
    master, slave = pty.openpty()
    return args, {**hf_env(tmp_path), "COLUMNS": "100"}, master, slave


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["INT", "TERM", "KILL"])
def test_a_signal_by_pid_ends_the_child_as_a_fresh_one(tmp_path: Path, sig: int) -> None:
    """`kill -SIG <pid>` of a gc waiting at its question: the forked child ends with the status a
    fresh `python -m cachetool` ends with for that signal (a KeyboardInterrupt's, or killed by
    it), and the zygote reaps it: no zombie stays."""
    args, env, master, slave = _waiting_gc(tmp_path)
    # Both commands start as from a terminal, SIGINT not ignored (a suite run as a background job
    # of a non-interactive shell ignores it, and both would ignore it too).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        statuses = []
        for start in ("forked", "cold"):
            kw: dict[str, Any] = {"env": env, "stdin": slave, "stdout": subprocess.PIPE}
            kw["stderr"] = subprocess.PIPE
            if start == "forked":
                proc: Any = forks.ForkedProcess(args, **kw)
                out_fd = proc.stdout_fd
            else:
                proc = subprocess.Popen(args, **kw)
                out_fd = proc.stdout.fileno()
            seen = b""
            while b"[y/N]" not in seen:
                assert select.select([out_fd], [], [], 120)[0], seen
                chunk = os.read(out_fd, 4096)
                assert chunk, seen
                seen += chunk
            _asleep(proc.pid)
            os.kill(proc.pid, sig)
            _, err = proc.communicate(timeout=120)
            statuses.append((proc.returncode, err.replace(str(proc.pid).encode(), b"PID")))
            if start == "forked":
                zygote = proc.zygote.proc.pid
                assert _children(zygote) == [], "the zygote left a child behind"
        assert statuses[0] == statuses[1]
        assert statuses[0][0] == (-sig if sig != signal.SIGINT else statuses[1][0])
        assert len(list((tmp_path / "cache").rglob("cache-*.arrow"))) == 2  # nothing was removed
    finally:
        signal.signal(signal.SIGINT, before)
        os.close(master)
        os.close(slave)


def _asleep(pid: int) -> None:
    """Wait until `pid` sleeps (state S): after its question, in the read of the answer. A SIGINT
    that lands between the prompt's write and that read is taken by the C handler outside any
    system call, and the interpreter (cold as well as forked) then blocks in the read for good:
    the test would measure that race of CPython's, not how the process ends."""
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "S":
        assert time.monotonic() < deadline, "the command never waited for its answer"
        time.sleep(0.01)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (zombies included)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def test_a_timeout_kills_the_child_and_a_dead_zygote_is_a_clear_error(tmp_path: Path) -> None:
    """`run(timeout=...)` of a command that waits ends it (TimeoutExpired, the child killed and
    reaped); a zygote killed while its child runs is an error naming it, not a hang or a made-up
    exit code, and the next command gets a new zygote."""
    args, env, master, slave = _waiting_gc(tmp_path)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            forks.run(args, env=env, stdin=slave, capture_output=True, timeout=1)  # it waits forever
        zygote = forks.zygote_for(env)
        assert _children(zygote.proc.pid) == []
        proc = forks.ForkedProcess(args, env=env, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.kill(zygote.proc.pid, signal.SIGKILL)
        with pytest.raises(forks.ZygoteDied, match=rf"warm cachetool parent \(pid {zygote.proc.pid}\) died"):
            proc.wait(timeout=120)
        os.kill(proc.pid, signal.SIGKILL)  # the orphan, now init's
        again = forks.run([*CLI, "--version"], env=env, capture_output=True, timeout=120)
        assert again.returncode == 0 and again.stdout.startswith(b"cachetool ")
        assert forks.zygote_for(env).proc.pid != zygote.proc.pid
    finally:
        os.close(master)
        os.close(slave)


def test_a_timeout_does_not_wait_for_what_the_command_started(tmp_path: Path) -> None:
    """As `subprocess.run`: on a timeout the command is killed and reaped, and its output pipes
    are not read to their end, which a process it started and left holding them would delay
    (here `cachetool run` of a script that leaves a `sleep 30` behind)."""
    script = tmp_path / "leaves_a_sleeper.py"
    pid_file = tmp_path / "sleeper.pid"
    script.write_text(
        "import subprocess, sys, time\n"
        "sleeper = subprocess.Popen(['sleep', '30'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(sleeper.pid))\n"
        "time.sleep(30)\n"
    )
    started = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            forks.run(
                [*CLI, "run", str(script)], env=hf_env(tmp_path), cwd=tmp_path, capture_output=True, timeout=2
            )
        assert time.monotonic() - started < 20  # not the sleeper's 30 s
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_command_forked_with_pyarrow_preloaded_answers_as_a_fresh_interpreter(tmp_path: Path) -> None:
    """`run(preload=("pyarrow",))` forks the command from a warm parent of its own, which has
    pyarrow loaded (the plain one has not): `verify` answers as a fresh `python -m cachetool
    verify`, the same exit code, stdout and stderr."""
    root = tmp_path / "cache"
    damaged = synthesize_cache(root, 3)[0]
    damaged.write_bytes(damaged.read_bytes()[:200])
    env = hf_env(tmp_path)
    args = [*CLI, "verify", "--cache-dir", str(root)]
    warm = forks.run(args, env=env, capture_output=True, timeout=120, preload=("pyarrow",))
    cold = subprocess.run(args, env=env, capture_output=True, timeout=120)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert warm.returncode == 1 and damaged.name.encode() in warm.stdout, warm.stdout

    def loads_arrow(pid: int) -> bool:
        return "libarrow" in Path(f"/proc/{pid}/maps").read_text()

    preloaded, plain = forks.zygote_for(env, ("pyarrow",)), forks.zygote_for(env)
    assert preloaded.proc.pid != plain.proc.pid
    assert loads_arrow(preloaded.proc.pid) and not loads_arrow(plain.proc.pid)


#: Prints what a pipeline's run depends on beyond its code: a map's fingerprint, the fingerprint
#: of a shuffle without a seed (`datasets` takes its seed from numpy's global random state), the
#: temp dir, the working directory and its arguments.
PIPELINE_PROBE = """\
import json, os, sys, tempfile
from datasets import Dataset
ds = Dataset.from_dict({"x": list(range(20))})
print(json.dumps({
    "map": ds.map(lambda ex: {"y": ex["x"] * 2})._fingerprint,
    "shuffled": ds.shuffle()._fingerprint,
    "tmp": tempfile.gettempdir(),
    "cwd": os.getcwd(),
    "argv": sys.argv[1:],
}))
"""


def test_a_pipeline_forked_with_datasets_dependencies_preloaded_runs_as_a_fresh_one(tmp_path: Path) -> None:
    """`cachetool run` of a pipeline forked from a warm parent that has imported what `datasets`
    imports (`forks.PIPELINE`) gives what a fresh one gives: the same fingerprints, temp dir,
    working directory and arguments; and two forked runs shuffle without a seed differently, as
    two fresh interpreters do (numpy's global random state is the zygote's unless seeded again)."""
    (tmp_path / "p.py").write_text(PIPELINE_PROBE, encoding="utf-8")
    env = hf_env(tmp_path)
    args = [*CLI, "run", "p.py", "an argument"]

    def ran(warm: bool) -> dict[str, Any]:
        how = {"preload": forks.PIPELINE} if warm else {}
        proc = (forks.run if warm else subprocess.run)(
            args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, **how
        )
        assert proc.returncode == 0, proc.stderr
        out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
        return out

    cold, warm, again = ran(False), ran(True), ran(True)
    assert warm["shuffled"] != again["shuffled"]
    for out in (warm, again):
        assert {**out, "shuffled": ""} == {**cold, "shuffled": ""}
    assert cold["tmp"] == env["TMPDIR"] and cold["cwd"] == str(tmp_path) and cold["argv"] == ["an argument"]


def test_a_forked_script_runs_as_python_runs_it(tmp_path: Path) -> None:
    """`forks.run([python, SCRIPT.py, ARGS])` runs the script as `python SCRIPT.py ARGS` does: in
    `__main__`, with its path as `__file__` and `sys.argv[0]`, its folder first on `sys.path`, its
    arguments, its output and its exit status; `[python, -c, CODE, ARGS]` as `python -c` does."""
    code = (
        "import json, sys\n"
        "def f(): pass\n"
        "print(json.dumps([__name__, globals().get('__file__'), sys.argv, sys.path[0], f.__module__,"
        " sys.modules['__main__'].f is f]))\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(int(sys.argv[-1]))\n"
    )
    script = tmp_path / "folder" / "report.py"
    script.parent.mkdir()
    script.write_text(code)
    env = hf_env(tmp_path)
    for args in ([sys.executable, str(script), "an argument", "3"], [sys.executable, "-c", code, "arg", "4"]):
        forked = forks.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        cold = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        said = [(p.returncode, p.stdout, p.stderr) for p in (forked, cold)]
        assert said[0] == said[1]
        assert cold.returncode == int(args[-1]) and json.loads(cold.stdout)[-1] is True
