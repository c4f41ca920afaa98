"""`cachetool run`: run a script exactly as `python script.py args...` would (a module as
`python -m module`), with tracing on: same pid, stdio, signals, exit status, `sys.argv`,
`sys.path[0]` and a fresh `__main__`; tracebacks leave out the bootstrap's frames.
"""

from __future__ import annotations

import os
import sys

from cachetool.errors import CachetoolError

# `cachetool run` imports this module in the interpreter it replaces: nothing it does not use
# (typing, subprocess) is imported for it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType
    from typing import Any, NoReturn

    ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]

_BOOTSTRAP = (
    "import sys; sys.path.append({path!r}); import cachetool.trace.runner as _r; "
    "sys.path.pop(); _r._bootstrap()"
)


class ScriptNotFound(CachetoolError):
    """The script given to `cachetool run` does not exist."""

    def __init__(self, script: str) -> None:
        super().__init__(f"can't open file '{script}': No such file or directory")
        self.script = script


class NoMainModule(CachetoolError):
    """The folder or zip file given to `cachetool run` has no `__main__` module to run."""

    def __init__(self, script: str) -> None:
        super().__init__(f"can't find '__main__' module in '{script}'")
        self.script = script


#: What the bootstrap's first argument is when it runs a module (`cachetool run -m module`).
MODULE_FLAG = "-m"


def check_script(script: str) -> None:
    """Raise what `python script` would refuse to start with: `ScriptNotFound` (no such file),
    `NoMainModule` (a folder, or a zip file not named `.py`, without a `__main__` module)."""
    if not os.path.exists(script):
        raise ScriptNotFound(script)
    if _is_package_path(script):
        import pkgutil  # what runpy uses to find `__main__` there (runpy imports it anyway)

        importer = pkgutil.get_importer(script)
        if importer is None or importer.find_spec("__main__") is None:
            raise NoMainModule(script)


def _is_package_path(script: str) -> bool:
    """A folder or zip file that python runs through its `__main__` module."""
    return os.path.isdir(script) or (not script.endswith((".py", ".pyw")) and _is_zip(script))


def command(script: str, args: Sequence[str], *, module: bool = False) -> list[str]:
    """`python -m cachetool.trace.bootstrap [-m] script.py args...` (`ps` shows the script), or
    `python -c <bootstrap>` when a fresh interpreter could not import cachetool by itself."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    flags = interpreter_flags()
    target = [MODULE_FLAG, script] if module else [script]
    if _importable_in_child(package_parent, flags):
        return [sys.executable, *flags, "-m", "cachetool.trace.bootstrap", *target, *args]
    return [sys.executable, *flags, "-c", _BOOTSTRAP.format(path=package_parent), *target, *args]


def interpreter_flags() -> list[str]:
    """The command-line options that give a new interpreter this one's settings (`sys.flags`,
    `-W`, `-X`), as the standard library's own child interpreters get them."""
    import subprocess

    return subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]


def _importable_in_child(package_parent: str, flags: Sequence[str]) -> bool:
    """A new interpreter with `flags`, here, finds cachetool (on its default path, or in the
    working folder `-m` puts first unless `-I`/`-P`)."""
    here = os.path.realpath(package_parent)
    inherited = {os.path.realpath(p) for p in sys.path[1:] if p}  # [0]: this launcher's own folder
    if here in inherited or ("-S" not in flags and _found_by_installed_finder(here)):
        return True
    isolated = "-I" in flags or "-P" in flags
    return not isolated and here == os.path.realpath(os.getcwd())


def _found_by_installed_finder(here: str) -> bool:
    """An editable install (setuptools' finder, added by a `.pth` file in site-packages, so every
    interpreter that runs `site` gets it) maps cachetool to `here` without putting it on sys.path."""
    from importlib.machinery import BuiltinImporter, FrozenImporter, PathFinder

    for finder in sys.meta_path:
        if finder in (PathFinder, BuiltinImporter, FrozenImporter) or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec("cachetool", None)
        except Exception:
            continue
        origin = getattr(spec, "origin", None) if spec is not None else None
        if origin and os.path.realpath(origin).startswith(here + os.sep):
            return True
    return False


def run_script(
    script: str,
    args: Sequence[str],
    *,
    events_file: str | None = None,
    module: bool = False,
    reuse_equivalent: bool = False,
    once: bool = False,
    remote: str | None = None,
) -> NoReturn:
    """Replace this process by `python script.py args...` (with `module`, `python -m script
    args...`) with tracing on. Does not return; raises `ScriptNotFound` or `NoMainModule` first
    for a script python would refuse.

    With `events_file`, every event goes to that JSON Lines file instead of the ledger. With
    `reuse_equivalent`, a map about to compute takes an equivalent earlier result once sampled
    batches prove it (`cachetool.trace.rekey`). With `once`, a step another process computes in
    the same cache is waited for, then loaded (`cachetool.trace.once`). With `remote`
    (`s3://bucket/prefix`, as `CACHETOOL_REMOTE`), a step's result is pulled from it on a miss
    and pushed to it once computed (docs/remote.md)."""
    if not module:
        check_script(script)
    env = dict(os.environ)
    if remote:
        env["CACHETOOL_REMOTE"] = remote
    if events_file is not None:
        env["CACHETOOL_TRACE_EVENTS"] = os.path.abspath(events_file)
    if reuse_equivalent:
        env["CACHETOOL_REUSE_EQUIVALENT"] = "1"
    if once:
        env["CACHETOOL_ONCE"] = "1"
    argv = command(script, args, module=module)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)  # cachetool runs on POSIX systems only


def run_here(script: str, args: Sequence[str], *, module: bool = False) -> NoReturn:
    """`cachetool run [-m] SCRIPT ARGS...` from the console script, before anything but the
    bootstrap is imported: `run_script` in this interpreter. Does not return."""
    if not module:
        check_script(script)
    sys.argv[:] = [sys.argv[0], *([MODULE_FLAG] if module else []), script, *args]
    _bootstrap()
    raise SystemExit(0)  # the script ended: the launcher's own code must not go on


def _bootstrap() -> None:
    """Inside the fresh interpreter: become `python script.py args...`, install tracing, run."""
    argv = sys.argv[1:]  # sys.argv was ["-c" or the bootstrap's path, script, *args]
    script = argv[0]
    sys.argv[:] = argv
    from cachetool.trace.install import end_run, install_tracing, note_exit, take_environment

    take_environment()  # the script sees no CACHETOOL_* variable (the tracer keeps its settings)
    run: Callable[[], object]
    if script == MODULE_FLAG and len(argv) > 1:
        # `python -m module args...`: runpy's own code for it (argv[0] becomes the module's file;
        # a module that is not there ends with python's one line and exit status 1).
        import runpy

        sys.argv[:] = argv[1:]
        first = os.getcwd()
        run = lambda: runpy._run_module_as_main(argv[1], alter_argv=True)  # type: ignore[attr-defined]  # noqa: E731
    elif _is_package_path(script):  # a folder or zip with __main__.py: runpy knows those rules
        import runpy

        first = script
        run = lambda: runpy.run_path(script, run_name="__main__")  # noqa: E731
    else:
        first = os.path.dirname(os.path.realpath(script))
        run = _main_module(script)
    if not getattr(sys.flags, "safe_path", False):  # `python -P` adds no script folder
        sys.path[0] = first
    install_tracing()
    sys.excepthook = _trimming_hook(sys.excepthook)
    os._exit = _ending_exit(os._exit, os.getpid())  # type: ignore[assignment]
    # The run's end record keeps the exit status and the exception (its frames are trimmed from
    # tracebacks).
    try:
        run()
    except BaseException as e:
        note_exit(e)
        if isinstance(e, KeyboardInterrupt):
            end_run()  # now: at exit it would clear CPython's note to end by SIGINT, as python does
        raise
    note_exit(None)


def _ending_exit(original: Callable[[int], NoReturn], pid: int) -> Callable[[int], NoReturn]:
    """`os._exit` that records the run's end first when the script's own process calls it (code
    run at exit is skipped, and the run would read as killed); a forked worker's goes straight on."""
    from cachetool.trace.install import end_run, note_exit

    def _exit(status: int) -> NoReturn:
        if os.getpid() == pid:
            note_exit(SystemExit(status))
            end_run()
        original(status)

    return _exit


def _main_module(script: str) -> Callable[[], object]:
    """Runs the script as CPython runs `python script.py`: in a fresh `__main__` module."""
    import importlib.machinery
    from types import ModuleType

    # CPython joins a relative script path to the cwd without normalising it (`work/../x.py`).
    path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        # What CPython prints for a script it cannot open, with its exit status.
        print(f"{sys.executable}: can't open file {path!r}: [Errno {e.errno}] {e.strerror}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        # CPython shows a script's syntax error without a traceback (no frame ran yet).
        import traceback

        traceback.print_exception(type(e), e, None)
        raise SystemExit(1) from None
    main = ModuleType("__main__")
    main.__dict__.update(
        {
            "__file__": path,
            "__cached__": None,
            "__loader__": importlib.machinery.SourceFileLoader("__main__", path),
            "__spec__": None,
            "__package__": None,
            "__annotations__": {},
            "__builtins__": sys.modules["builtins"],
        }
    )
    sys.modules["__main__"] = main
    return lambda: exec(code, main.__dict__)


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False


def _trimming_hook(original: ExceptHook) -> ExceptHook:
    """An excepthook that drops the bootstrap's and the tracer's frames from tracebacks, so an
    uncaught exception reads as it would under plain `python script.py`."""
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        seen: set[int] = set()
        e: BaseException | None = exc
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            e.__traceback__ = _trim(e.__traceback__, here)
            e = e.__cause__ or e.__context__
        original(exc_type, exc, exc.__traceback__)

    return hook


def _trim(tb: TracebackType | None, here: str) -> TracebackType | None:
    keep: list[TracebackType] = []
    # Whatever called the bootstrap (runpy, the console script, `cachetool.cli.entry`, the
    # determinism waiter) is not the script's: its frames go, up to the bootstrap's own.
    first = tb
    while first is not None and first.tb_frame.f_code is not _bootstrap.__code__:
        first = first.tb_next
    if first is not None:
        tb = first
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        launcher = filename in ("<string>", "<frozen runpy>") or filename.endswith(os.sep + "runpy.py")
        if not (launcher and not keep) and not filename.startswith(here):
            keep.append(tb)
        tb = tb.tb_next
    for this, after in zip(keep, [*keep[1:], None], strict=True):
        this.tb_next = after
    return keep[0] if keep else None
