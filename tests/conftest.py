"""Shared fixtures: real caches built by the real `datasets` library, in temporary folders."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
BUILDERS = HERE / "builders"


_SHORT_TMP_DIRS: list[Path] = []


def short_tmp_dir(base: Path) -> Path:
    """A temp dir for subprocesses with a short path: multiprocessing puts its manager sockets
    there, and a Unix socket path may not exceed 107 bytes (pytest's tmp_path easily does)."""
    digest = hashlib.sha1(os.fsencode(base)).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"ct-{digest}"
    path.mkdir(exist_ok=True)
    if path not in _SHORT_TMP_DIRS:
        _SHORT_TMP_DIRS.append(path)
    return path


#: The suite runs with HOME pointed here (and no XDG_* folders): nothing may be written into it.
TEST_HOME = Path(tempfile.mkdtemp(prefix="cachetool-test-home-"))
#: The user's cache folder of the tests (outside the home folder, which must stay empty): what
#: read commands keep to be faster next time (`cachetool.cache.locations.derived_dir`) goes there.
TEST_XDG_CACHE = Path(tempfile.mkdtemp(prefix="cachetool-test-xdg-cache-"))
_XDG = ("XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")


def pytest_configure(config: pytest.Config) -> None:
    os.environ["HOME"] = str(TEST_HOME)
    for k in _XDG:
        os.environ.pop(k, None)
    os.environ["XDG_CACHE_HOME"] = str(TEST_XDG_CACHE)
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # once, before any worker starts
        _compile_cachetool()
        _compile_tests(config)


def _compile_cachetool() -> None:
    """Bring cachetool's bytecode (`__pycache__/*.pyc`, ignored by git) up to date. The suite
    starts some 600 processes that import cachetool, with PYTHONDONTWRITEBYTECODE=1 (`hf_env`,
    and many a developer's shell): where a module's bytecode is missing or older than its source
    each of them compiles it again, 0.03 to 0.1 s of CPU per process."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("cachetool")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            compileall.compile_dir(folder, quiet=2)


def _compile_tests(config: pytest.Config) -> None:
    """Bring the bytecode of the tests up to date: pytest's assertion-rewritten form of the test
    modules and conftest, and the plain form of the helper modules they import. With
    PYTHONDONTWRITEBYTECODE=1 pytest keeps none, so on a clean checkout each xdist worker rewrote
    and compiled every test module again (about 1.7 s of CPU per worker). pytest's rewriting API
    is private: where it changed, the workers compile as before."""
    import compileall

    compileall.compile_dir(HERE, quiet=2)
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        for fn in sorted(HERE.rglob("*.py")):
            if not (fn.name.startswith("test_") or fn.name == "conftest.py"):
                continue
            cache = rewrite.get_cache_dir(fn)
            pyc = cache / (fn.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(fn, pyc) is None and rewrite.try_makedirs(cache):
                source_hash, co = rewrite._rewrite_test(fn, config)
                rewrite._write_pyc(state, co, source_hash, pyc)
    except Exception:  # an optimisation only
        return


#: Tests that take longest (5 s or more on an idle core, alone or with their module's fixture):
#: under xdist they start first, so that no worker begins one when the other is nearly done.
#: A name missing here costs only time.
LONG_FIRST = (
    "tests/test_user_pipeline.py",
    "tests/attack/test_gc_races.py",
    "tests/test_cmd_lineage.py",
    "tests/test_rekey.py",
    "tests/test_cmd_check_determinism.py::test_the_cold_run_computes_every_step_and_leaves_the_cache_as",
    "tests/test_stale_downstream.py::test_stale_results_reach_into_a_saved_folder_and_the_hints_remove",
    "tests/test_resume.py",
    "tests/test_trace.py::test_run_m_runs_a_module_as_python_m_does",
    "tests/remote/test_pipelines.py",
    "tests/attack/test_gc_swaps.py",
    "tests/test_tfdata.py",
    "tests/test_real_pipelines.py",
    "tests/test_hosts.py",
    "tests/test_trace_pickling.py",
    "tests/test_packaging.py",
    "tests/test_cmd_gc.py::test_gc_temp_removes_exactly_the_leftovers_of_killed_processes",
    "tests/test_cmd_lineage_args.py",
    "tests/test_ledger_compact.py::test_a_compaction_killed_at_any_point_loses_nothing",
    "tests/attack/test_quarantine_race.py",
    "tests/test_cmd_report.py",
    "tests/test_forks.py::test_a_forked_command_answers_as_a_fresh_interpreter",
)


def _rank(item: pytest.Item) -> tuple[bool, int]:
    """Slow before fast; among slow ones the LONG_FIRST ones first, in its order."""
    hinted = [i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)]
    return (item.get_closest_marker("slow") is None, hinted[0] if hinted else len(LONG_FIRST))


@pytest.hookimpl(trylast=True)  # after -k, -m and --deselect have chosen the items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (`-n 3`), the longest tests first and the fast lane last (each group in its
    usual order), so that both workers end on short tests and finish together (see
    `pytest_xdist_make_scheduler`). A run in one process keeps the file order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker collects, in the same order
        items.sort(key=_rank)


def module_aware_load(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduler for `-n N` (xdist is imported here: the compat sessions run without it)."""
    from xdist.scheduler import LoadScheduling

    class ModuleAwareLoad(LoadScheduling):
        """What `--dist load` does, a test or two at a time, each worker staying in its module.

        xdist's own `load` hands each worker a quarter of the tests at first and refills by dozens:
        with tests of 0.1 to 15 s, one worker was still running its share a minute after the other
        had run out. Here each worker holds at most two tests and is sent the next one when it has
        run one, so both stay busy to the end. The next test is the first pending one of the module
        the worker is in (a module-wide fixture, such as a pipeline run once for the module, is then
        made on that worker only, not again on the other), else the first of a module no other
        worker is in, else the first pending one."""

        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            if self.maxschedchunk is None:  # `--maxschedchunk` not given
                self.maxschedchunk = 1
            self.node_module: dict[Any, str] = {}

        def _send_tests(self, node: Any, num: int) -> None:
            chosen = []
            for _ in range(min(num, len(self.pending))):
                chosen.append(self.pending.pop(self._pick(node)))
                self.node_module[node] = self._module(chosen[-1])
            if chosen:
                self.node2pending[node].extend(chosen)
                node.send_runtest_some(chosen)

        def _module(self, index: int) -> str:
            assert self.collection is not None
            return self.collection[index].split("::")[0]

        def _pick(self, node: Any) -> int:
            modules = [self._module(i) for i in self.pending]
            mine = self.node_module.get(node)
            if mine in modules:
                return modules.index(mine)
            others = {m for n, m in self.node_module.items() if n is not node}
            return next((k for k, m in enumerate(modules) if m not in others), 0)

    return ModuleAwareLoad(config, log)


@pytest.hookimpl(optionalhook=True)  # a hook of xdist, absent with `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`-n N` schedules with `module_aware_load`'s scheduler; another `--dist` is kept."""
    if config.getvalue("dist") != "load":
        return None
    return module_aware_load(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-top",
        type=int,
        default=0,
        metavar="N",
        help="after the run, list the N tests and the N files that took the most CPU time: their "
        "own (setup, call, teardown) and that of the processes they started and waited for, and of "
        "the commands and pipelines they ran forked (tests/forks.py)",
    )


#: What `--cpu-top` counts for a test: its own CPU, that of the processes it started, that of the
#: commands and of the pipelines it ran forked by tests/forks.py.
CPU_PARTS = ("test", "procs", "forked", "fpipes")


def _forks_cpu() -> tuple[float, float, float, float]:
    """tests/forks.py's counts: (forked commands, forked pipelines, the warm parents' own CPU,
    what reaping the warm parents added to RUSAGE_CHILDREN), all 0 before it is imported."""
    counts = [
        (*sys.modules[m].forked_cpu(), *sys.modules[m].zygote_cpu())
        for m in ("tests.forks", "forks")
        if m in sys.modules
    ]
    return tuple(sum(c[i] for c in counts) for i in range(4))  # type: ignore[return-value]


def _cpu_seconds() -> tuple[float, ...]:
    """CPU time (user + system) of this process, of its children that have been waited for
    (with theirs), and of the commands and the pipelines it forked (tests/forks.py) that have
    ended: a process a test ran is counted once it has ended and been reaped. A warm parent
    reaped during a test (one too many kept) is left out of its children: its commands are
    counted as they end, its own CPU apart (`_cpu_outside_tests`)."""
    me, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    commands, pipelines, _, reaped = _forks_cpu()
    children_cpu = children.ru_utime + children.ru_stime - reaped
    return me.ru_utime + me.ru_stime, children_cpu, commands, pipelines


_CPU_START = pytest.StashKey[tuple[float, ...]]()
_CPU_PROPERTY = "cpu seconds (" + ", ".join(CPU_PARTS) + ")"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.getoption("cpu_top"):
        item.stash[_CPU_START] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """With `--cpu-top`, the teardown report of each test carries the CPU time spent from its
    setup to its teardown (a module or session fixture counts for the test that made it). The
    warm parents of tests/forks.py (a second or so each, once per worker) are counted apart, at
    the end of the session (`_cpu_outside_tests`)."""
    if call.when == "teardown" and _CPU_START in item.stash:
        then, now = item.stash[_CPU_START], _cpu_seconds()
        spent = tuple(b - a for a, b in zip(then, now, strict=True))
        item.user_properties.append((_CPU_PROPERTY, spent))
        _CPU_HERE[:] = [a + b for a, b in zip(_CPU_HERE, spent, strict=True)]
    yield


_CPU_SPENT: dict[str, tuple[float, ...]] = {}
#: What the tests run in this process spent, by CPU_PARTS.
_CPU_HERE: list[float] = [0.0] * len(CPU_PARTS)
#: What `--cpu-top` adds to the tests' CPU: the warm parents' own, and pytest's outside tests
#: (start, collection, xdist; each worker's and the controller's).
OUTSIDE_PARTS = ("warm parents", "pytest outside tests")
_CPU_OUTSIDE: list[float] = [0.0] * len(OUTSIDE_PARTS)
_WORKERS_DOWN: list[Any] = []  # the xdist workers that ended (in the controller)


def _cpu_outside_tests(children: bool = True) -> tuple[float, float]:
    """This process's CPU not counted in a test (called at the end of the session, once the warm
    parents are reaped): the warm parents' own, and its own (and with `children`, that of the
    children it reaped) outside tests."""
    me, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    _, _, zygotes, reaped = _forks_cpu()
    mine = me.ru_utime + me.ru_stime + (kids.ru_utime + kids.ru_stime - reaped if children else 0.0)
    return zygotes, mine - _CPU_HERE[0] - _CPU_HERE[1]


@pytest.hookimpl(optionalhook=True)  # a hook of xdist
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller adds up what each worker spent outside its tests (`pytest_sessionfinish`)."""
    _WORKERS_DOWN.append(node)
    for i, spent in enumerate(getattr(node, "workeroutput", {}).get("cpu_outside_tests", ())):
        _CPU_OUTSIDE[i] += spent


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties if report.when == "teardown" else ():
        if name == _CPU_PROPERTY:
            _CPU_SPENT[report.nodeid] = tuple(value)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    top = config.getoption("cpu_top")
    if not top or not _CPU_SPENT:
        return
    per_file: dict[str, list[float]] = {}
    for nodeid, parts in _CPU_SPENT.items():
        spent = per_file.setdefault(nodeid.split("::")[0], [0.0] * len(CPU_PARTS))
        for i, part in enumerate(parts):
            spent[i] += part
    write = terminalreporter.write_line
    total = [sum(v[i] for v in _CPU_SPENT.values()) for i in range(len(CPU_PARTS))]
    outside = list(_CPU_OUTSIDE)
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # this process: the controller, or the only one
        # A controller's children are its workers, counted by themselves.
        zygotes, mine = _cpu_outside_tests(children=not _WORKERS_DOWN)
        outside[0] += zygotes
        outside[1] += mine
    terminalreporter.section(
        f"CPU seconds {sum(total) + sum(outside):.0f} (tests {total[0]:.0f} + their processes"
        f" {total[1]:.0f} + forked commands {total[2]:.0f} + forked pipelines {total[3]:.0f}"
        f" + warm parents {outside[0]:.0f} + pytest outside tests {outside[1]:.0f})"
    )
    for name, spent in zip(OUTSIDE_PARTS, outside, strict=True):
        write(f"{spent:7.1f}  {name} (in no test below)")
    write(" ".join(f"{name:>7}" for name in ("total", *CPU_PARTS)))
    for title, rows in (("tests", _CPU_SPENT), ("files", per_file)):
        write(f"-- the {top} {title} that took the most")
        for name, parts in sorted(rows.items(), key=lambda kv: -sum(kv[1]))[:top]:
            write(" ".join(f"{x:7.1f}" for x in (sum(parts), *parts)) + f"  {name}")


def _home_contents() -> list[str]:
    return sorted(p.relative_to(TEST_HOME).as_posix() for p in TEST_HOME.rglob("*"))


@pytest.fixture(autouse=True)
def _home_untouched() -> Iterator[None]:
    """Every test (and every process it starts) leaves the home folder as it found it: empty. A
    test that writes there would write into a real user's home (their cachetool state, a cache)."""
    yield
    written = _home_contents()
    if written:
        shutil.rmtree(TEST_HOME, ignore_errors=True)
        TEST_HOME.mkdir(exist_ok=True)
        pytest.fail(f"the test wrote into the home folder: {', '.join(written[:5])}", pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for name in ("tests.forks", "forks"):  # the warm parents of `forks.run` (tests/ a package or not)
        if name in sys.modules:
            sys.modules[name].close_all()
    workeroutput = getattr(session.config, "workeroutput", None)  # an xdist worker's, for the controller
    if workeroutput is not None and session.config.getoption("cpu_top"):
        workeroutput["cpu_outside_tests"] = _cpu_outside_tests()
    for path in _SHORT_TMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(TEST_HOME, ignore_errors=True)


#: The checkout the suite runs from.
ROOT = HERE.parent


def copy_checkout(dest: Path) -> None:
    """Copy the checkout's own files (tracked, or new and not ignored: what `git ls-files -co
    --exclude-standard` lists) to `dest`, leaving out what .gitignore names (virtualenvs, nox's
    environments, build and tool caches), which can be gigabytes and are no part of the project."""
    listed = ["git", "ls-files", "-z", "-co", "--exclude-standard"]
    files = subprocess.run(listed, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file() and not rel.startswith(".venv"):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def hf_env(base: Path, **extra: str) -> dict[str, str]:
    """An environment for a subprocess that uses `datasets` inside `base` only: cache, temp dir
    and HF home all point there, and nothing reaches for the network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CACHETOOL_", "PYTHONHASHSEED"))}
    env.update(
        HF_HOME=str(base / "hf_home"),
        HF_DATASETS_CACHE=str(base / "cache"),
        HF_HUB_OFFLINE="1",
        HF_UPDATE_DOWNLOAD_COUNTS="0",
        HF_DATASETS_DISABLE_PROGRESS_BARS="1",
        TMPDIR=str(short_tmp_dir(base)),
        CACHETOOL_HOME=str(base / "cachetool_home"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(extra)
    return env


def write_anew(path: Path, data: bytes) -> None:
    """Write `data` to `path` as a new file (the old one unlinked first). Rewriting a file in place
    (truncate, write, close) makes ext4 start writing it to disk at the close (its `auto_da_alloc`
    rule for replace-via-truncate) and wait for the previous write: ~4 ms each, most of the time
    of a test that writes thousands of variants of one file."""
    path.unlink(missing_ok=True)
    path.write_bytes(data)


def shared_session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's temp folder, common to every xdist worker (each worker has one of its own
    below it): what is built there once serves them all."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def real_cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A cache holding every kind of entry (see tests/builders/build_cache.py), built once per
    session even under xdist. Tests only read it."""
    # The remote files come from a loopback HTTP server the builder starts.
    base, made = build_once(tmp_path_factory, "real_cache", "build_cache.py", HF_HUB_OFFLINE="0")
    made["base"] = str(base)
    return made


def copy_cache(src: Path, dst: Path) -> None:
    """Copy the datasets cache root `src` to `dst` (a cp -a: ms for a small cache), so that
    `datasets` finds its prepared datasets and cache files there as in `src`. `datasets` names a
    builder folder's lock after the folder's path: the copy's locks are named after `dst`."""
    shutil.copytree(src, dst, symlinks=True)
    was, now = (str(root).replace("/", "_") for root in (src, dst))
    for lock in dst.glob(f"{was}_*.lock"):
        lock.rename(dst / (now + lock.name[len(was) :]))


def once_per_session(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], bytes]
) -> tuple[Path, bytes]:
    """`make(<session>/name)` (a fresh folder) once per session, however many xdist workers ask:
    the first makes it, the others wait for it. Returns the folder and what `make` returned (kept
    in `<session>/name.made`)."""
    from filelock import FileLock

    shared = shared_session_dir(tmp_path_factory)
    base = shared / name
    made_file = shared / f"{name}.made"
    with FileLock(str(shared / f"{name}.lock")):
        if not made_file.exists():
            shutil.rmtree(base, ignore_errors=True)
            base.mkdir()
            made_file.write_bytes(make(base))
    return base, made_file.read_bytes()


def build_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, builder: str, *folders: str, **env: str
) -> tuple[Path, dict[str, Any]]:
    """Run tests/builders/`builder` into `<session>/name` (with its `folders` made first and `env`
    added, `{base}` in a value naming the folder) once per session, however many xdist workers
    ask: the first builds, the others wait for it. Returns the folder and what the builder
    printed last (a JSON object)."""

    def build(base: Path) -> bytes:
        for folder in folders:
            (base / folder).mkdir()
        proc = subprocess.run(
            [sys.executable, str(BUILDERS / builder), str(base)],
            env=hf_env(base, **{k: v.format(base=base) for k, v in env.items()}),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.strip().splitlines()[-1].encode()

    base, made = once_per_session(tmp_path_factory, name, build)
    return base, json.loads(made)


@pytest.fixture
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point every location variable into tmp_path for in-process CLI tests."""
    for k in list(os.environ):
        if k.startswith(("HF_", "CACHETOOL_")) or k in ("XDG_CACHE_HOME", "XDG_STATE_HOME"):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CACHETOOL_HOME", str(tmp_path / "cachetool_home"))
    monkeypatch.setenv("COLUMNS", "120")
    yield tmp_path


def as_another_user(fn: Callable[[], Any]) -> Any:
    """What `fn` returns (as JSON) run in a forked child as the user nobody (uid 65534): the
    kernel, not a mock, says no. Import in this process what the child needs first."""
    import codecs

    codecs.lookup("ascii")  # the codec cachetool reads /proc with: this interpreter's files are root's
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: ends here whatever happens
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            os.write(w, json.dumps(fn()).encode())
        except BaseException:
            import traceback

            os.write(w, b"\0" + traceback.format_exc().encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = f.read()
    os.waitpid(pid, 0)
    assert got and not got.startswith("\0"), f"the child running as another user failed:\n{got[1:]}"
    return json.loads(got)


def invoke(*args: str, env: Mapping[str, str | None] | None = None, columns: int = 120) -> Any:
    """`cachetool ARGS` run in this process, as at a terminal `columns` wide (stdout and stderr
    apart, exceptions raised; a variable set to None in `env` is unset)."""
    from typer.testing import CliRunner

    from cachetool.cli.app import app

    return CliRunner().invoke(
        app, list(args), env={**(env or {}), "COLUMNS": str(columns)}, catch_exceptions=False
    )


@pytest.fixture(scope="session")
def leftovers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The cache of tests/builders/build_leftovers.py, built once even under xdist."""
    # The builder's temp dir is part of what the tests copy.
    base, made = build_once(
        tmp_path_factory, "gc_leftovers", "build_leftovers.py", "tmp", TMPDIR="{base}/tmp"
    )
    made["base"] = base
    return made


@pytest.fixture
def copy(leftovers: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the leftovers cache (cache/ and tmp/), in a base that hf_env understands."""
    for k in list(os.environ):
        if k.startswith(("HF_", "CACHETOOL_")):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("CACHETOOL_HOME", str(tmp_path / "cachetool_home"))
    base = tmp_path / "base"
    for name in ("cache", "tmp"):
        shutil.copytree(leftovers["base"] / name, base / name, symlinks=True)
    return base


def cachetool_run(
    script: str | os.PathLike[str],
    *args: str,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 300,
    check: bool = True,
    warm: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """`python -m cachetool run SCRIPT ARGS...` as a user runs a pipeline: a process of its own
    with the environment `env` (see `hf_env`), its output captured as text. With `check`, a
    failure fails the test with the end of the pipeline's stderr.

    With `warm`, the process is forked from a warm parent that has imported what `datasets`
    imports but `datasets` itself (`forks.PIPELINE`: 0.35 s of CPU a run instead of 1.1): still
    a process of its own that imports and runs the real `datasets`, but every warm run of the
    session shares one `str` hash seed. Only for a test whose runs may share it: none of its
    assertions may hold because two runs hashed a set or a `str` alike."""
    argv = [sys.executable, "-m", "cachetool", "run", os.fspath(script), *args]
    if warm:
        try:
            from tests import forks
        except ImportError:
            import forks  # type: ignore[no-redef]
        proc = forks.run(
            argv, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout,
            preload=forks.PIPELINE, **kwargs,
        )  # fmt: skip
    else:
        proc = subprocess.run(
            argv, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout, **kwargs
        )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


#: The input of the golden cache, at one path for every session: `datasets` hashes a data file's
#: path and modification time into the fingerprints, so the same path, bytes and mtime give the
#: same cache, fingerprints included, in every session and on every machine.
GOLDEN_CSV = Path("/tmp/cachetool-golden-input/reviews.csv")


def _golden_csv(made: Path) -> None:
    """Put the bytes of `made` at GOLDEN_CSV unless they are there already (sessions running at
    the same time find the file complete: it appears by one rename, with its mtime set)."""
    from filelock import FileLock

    from cachetool.demo_cache import DEMO_MTIME

    GOLDEN_CSV.parent.mkdir(exist_ok=True)
    data = made.read_bytes()
    with FileLock(str(GOLDEN_CSV.parent / ".lock")):
        try:
            st = GOLDEN_CSV.stat()
            if st.st_mtime == DEMO_MTIME and GOLDEN_CSV.read_bytes() == data:
                return
        except FileNotFoundError:
            pass
        tmp = GOLDEN_CSV.with_name(f".{GOLDEN_CSV.name}.{os.getpid()}")
        tmp.write_bytes(data)
        os.utime(tmp, (DEMO_MTIME, DEMO_MTIME))
        os.replace(tmp, GOLDEN_CSV)


@pytest.fixture(scope="session")
def golden() -> dict[str, Any]:
    """The golden cache: `cachetool demo`'s pipeline (a csv load, two maps, a filter, a shuffle, a
    `num_proc=2` map, a `save_to_disk`) run under `cachetool run` on GOLDEN_CSV, built once per
    session. Its fingerprints and sizes are the same in every session; only times and the temp
    folder differ. Tests read it; a test that changes it puts it back as it was."""
    from cachetool.demo_cache import write_demo_files

    # A folder whose path has the same length in every session, so that where a command shortens
    # a path to fit (`show`), it keeps the same names.
    base = Path(tempfile.mkdtemp(prefix="ct-golden-", dir="/tmp"))
    _SHORT_TMP_DIRS.append(base)  # removed at the end of the session
    script = write_demo_files(base / "demo")
    _golden_csv(base / "demo" / "reviews.csv")
    text = script.read_text(encoding="utf-8")
    fixed = text.replace('os.path.join(here, "reviews.csv")', repr(str(GOLDEN_CSV)))
    assert fixed != text, "the demo pipeline no longer reads reviews.csv from its folder"
    script.write_text(fixed, encoding="utf-8")
    env = hf_env(base)
    proc = cachetool_run(script, env=env, cwd=script.parent)
    return {
        "base": base,
        "env": env,
        "cache": env["HF_DATASETS_CACHE"],
        "folder": script.parent,
        "final": proc.stdout.split()[-1],
        "run": proc,
    }
