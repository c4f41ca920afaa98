"""The light path (`cachetool.cli.light`) answers plain command lines exactly as the Typer app.

`python -m cachetool ls ...` (and `show`, `lineage`, `explain` of one fingerprint) is answered
without Typer, Click or pydantic when the grammar read from the Typer commands covers the whole
command line, by the Typer app otherwise. Each command line here runs once through the console
entry and once through the Typer app directly; stdout, stderr and the exit code must be the same
bytes, and each line must have taken the path it is listed for (a line the light path leaves to
the Typer app proves nothing about the light path).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from cachetool.cli.output import Output, OutputFormat
from tests import forks

# The console entry (`python -m cachetool`), noting in a file which of the heavy modules it
# imported; and the Typer app with nothing in front of it. Both see the clock stopped at the
# same second, so the ages in a human listing (`5s ago`) are the same.
CLOCK = "import os, time\nnow = float(os.environ['NOW'])\ntime.time = lambda: now\n"
NOTE = (
    "import atexit, os, sys\n"
    "def note():\n"
    "    with open(os.environ['PROBE'], 'w') as f:\n"
    "        f.write(','.join(m for m in ('typer', 'click', 'pydantic', 'rich') if m in sys.modules))\n"
)
LIGHT = (
    CLOCK
    + NOTE
    + (
        "import runpy\n"
        "atexit.register(note)\n"
        "sys.argv[0] = 'cachetool'\n"
        "runpy.run_module('cachetool', run_name='__main__', alter_sys=True)\n"
    )
)
TYPER = CLOCK + "import sys\nsys.argv[0] = 'cachetool'\nfrom cachetool.cli.app import main\nmain()\n"
# LIGHT or TYPER for many command lines: the process imports once what the command lines need
# (WARM: most of a run's time), under the environment and working directory every child has;
# then it forks a child per line read on stdin (`[args, stdout file, stderr file]`), which
# answers it as LIGHT or TYPER would (same environment, clock and argv[0]; stdin /dev/null; its
# own exit; the probe noted when PROBE is set) and whose exit code the parent writes back.
FORKS = (
    CLOCK
    + NOTE
    + (
        "import json\n"
        "sys.argv[0] = 'cachetool'\n"
        "WARM\n"
        "for line in sys.stdin:\n"
        "    args, out, err = json.loads(line)\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        if 'PROBE' in os.environ:\n"
        "            atexit.register(note)\n"
        "        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)\n"
        "        os.dup2(os.open(out, os.O_WRONLY), 1)\n"
        "        os.dup2(os.open(err, os.O_WRONLY), 2)\n"
        "        sys.argv[1:] = args\n"
        "        main()\n"
        "        sys.exit()\n"
        "    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)\n"
    )
)
#: What the commands of MATRIX import to answer (0.03 to 0.05 s of CPU per command line in each
#: child otherwise), never Typer, Click or pydantic; a name that no longer exists is skipped.
MODELS = (
    "cachetool.cli.light",
    "cachetool.cli.ls",
    "cachetool.cli.show",
    "cachetool.cli.lineage",
    "cachetool.cli.explain",
    "cachetool.cache.scan",
    "cachetool.cache.query",
    "cachetool.cache.lookup",
    "cachetool.cache.pins",
    "cachetool.history.ledger",
    "cachetool.history.query",
    "cachetool.history.stats",
    "cachetool.history.explain.explainer",
)
_IMPORT = (
    "import importlib\n"
    "for name in {!r}:\n"
    "    try:\n"
    "        importlib.import_module(name)\n"
    "    except ImportError:\n"
    "        pass\n"
)
#: Never Typer, Click or pydantic: what the light path's answers import.
LIGHT_WARM = "from cachetool.cli.entry import main\n" + _IMPORT.format(MODELS)
#: The Typer app, what it loads on first use to read options (pydantic's parts through Typer's
#: adapters: 0.05 s of CPU per command line otherwise) and what its commands import: what the
#: warm parent of `forks.run` imports.
TYPER_WARM = "from cachetool.cli.app import main\n" + _IMPORT.format((*forks.WARM, *MODELS))


def _run(code: str, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stdout, proc.stderr


def _both(args: list[str], env: dict[str, str], probe: Path) -> tuple[tuple[int, str, str], ...]:
    """Both answers (the light one noting its imports in `probe`)."""
    env = {**env, "NOW": str(time.time())}
    return _run(LIGHT, args, {**env, "PROBE": str(probe)}), _run(TYPER, args, env)


class _Forks:
    """FORKS started once with `warm` and `env`: `answer(args)` is what `_run(LIGHT or TYPER,
    args, env)` gives."""

    def __init__(self, warm: str, env: dict[str, str], folder: Path) -> None:
        self.out, self.err = folder / f"{id(self)}.out", folder / f"{id(self)}.err"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORKS.replace("WARM", warm)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def answer(self, args: list[str]) -> tuple[int, str, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        for path in (self.out, self.err):
            path.write_bytes(b"")
        self.proc.stdin.write(json.dumps([args, str(self.out), str(self.err)]) + "\n")
        self.proc.stdin.flush()
        code = int(self.proc.stdout.readline())
        return code, self.out.read_text(), self.err.read_text()

    def close(self) -> None:
        self.proc.communicate(timeout=60)  # its stdin closed: it ends


@pytest.fixture(scope="module")
def golden_env(golden: dict[str, Any]) -> Iterator[dict[str, str]]:
    env = {**golden["env"], "COLUMNS": "120"}
    env.pop("CACHETOOL_DEBUG", None)
    yield env


MISSING = "/nonexistent/cache"

# (arguments, whether the light path answers them). `{cache}` is the golden cache (also the
# default root of the environment), `{saved}` its save_to_disk folder.
MATRIX: list[tuple[list[str], bool]] = [
    (["ls"], True),
    (["ls", "--json"], True),
    (["ls", "{cache}", "--format", "quiet", "--filter", "kind=indices", "--sort", "rows:asc"], True),
    (["ls", "-q", "--cache-dir", "{cache}", "-f", "rows>1", "--filter=kind=map", "--limit", "2"], True),
    (["ls", "--sort", "size:asc", "--no-truncate", "--format=human", "--limit=3"], True),
    (["ls", "{saved}", "--json"], True),
    (["ls", "--limit", "0", "--filter", "kind=map", "--filter", "rows>1"], True),
    (["--version"], True),
    (["-V"], True),
    # errors the model reports: the same `Error:` line and exit code
    (["ls", "--cache-dir", MISSING], True),
    (["ls", MISSING, "--json"], True),
    (["ls", "--filter", "size>lots"], True),
    (["ls", "--sort", "weight"], True),
    (["ls", "{cache}", "--cache-dir", "{cache}"], True),
    # what the grammar leaves to the Typer app
    (["ls", "--limit", "-1"], False),
    (["ls", "--limit", "ten"], False),
    (["ls", "--format", "xml"], False),
    (["ls", "--jso"], False),
    (["ls", "--help"], False),
    (["ls", "--cache-dir", " "], False),
    (["ls", "{cache}", "{cache}"], False),
    (["ls", "--sort", "size", "--sort", "rows"], False),
    # show, lineage and explain of one fingerprint (`{fp}` a unique prefix of the final step's)
    (["show", "{final}"], True),
    (["show", "{fp}", "--json", "--cache-dir", "{cache}"], True),
    (["show", "{fp}", "-q", "--no-truncate"], True),
    (["show", "{fp}", "--format=human", "--no-truncate"], True),
    (["show", "0000dead"], True),
    (["show"], False),
    (["lineage", "{fp}"], True),
    (["lineage", "{final}", "--json", "--cache-dir", "{cache}"], True),
    (["lineage", "{fp}", "-d", "--format", "dot"], True),
    (["lineage", "{fp}", "--all", "--internal", "--format=mermaid"], True),
    (["lineage", "{fp}", "-q", "--all-roots", "-a"], True),
    (["lineage", "0000dead"], True),
    (["lineage", "{fp}", "-da"], False),
    (["explain", "{fp}"], True),
    (["explain", "{final}", "--json", "--history", "1"], True),
    (["explain", "{fp}", "-q", "--all-roots", "--cache-dir", "{cache}"], True),
    (["explain", "--last"], True),
    (["explain"], True),
    (["explain", "--script", "pipeline.py"], False),
    (["explain", "{fp}", "--history", "-1"], False),
]


@pytest.mark.slow
def test_light_path_answers_as_the_typer_app(
    golden: dict[str, Any], golden_env: dict[str, str], tmp_path: Path
) -> None:
    """A user gets the same stdout, stderr and exit code from `cachetool ls ...` (`show`,
    `lineage`, `explain`, `--version`) whether or not
    the command line is plain enough for the light path, on a real cache; plain lines never
    import Typer, Click or pydantic, the others are answered by the Typer app."""
    saved = str(Path(golden["folder"]) / "saved" / "reviews")
    probe = tmp_path / "probe"
    env = {**golden_env, "NOW": str(time.time())}  # one stopped clock for every line
    typer_app = _Forks(TYPER_WARM, env, tmp_path)
    light_path = _Forks(LIGHT_WARM, {**env, "PROBE": str(probe)}, tmp_path)
    try:
        for template, light_expected in MATRIX:
            args = [
                a.format(cache=golden["cache"], saved=saved, final=golden["final"], fp=golden["final"][:8])
                for a in template
            ]
            probe.unlink(missing_ok=True)
            light = light_path.answer(args)
            assert light == typer_app.answer(args), f"cachetool {' '.join(template)}"
            imported = probe.read_text().split(",")
            took_light = "typer" not in imported
            assert took_light == light_expected, f"cachetool {' '.join(template)}: imported {imported}"
            if light_expected:
                assert not {"click", "pydantic"} & set(imported), template
    finally:
        typer_app.close()
        light_path.close()
    # the default root that does not exist, through the environment: nothing cached yet
    env = {**golden_env, "HF_DATASETS_CACHE": MISSING}
    light, typer = _both(["ls", "--json"], env, probe)
    assert light == typer and light[0] == 0 and json.loads(light[1])["entries"] == [], light


@pytest.mark.slow
def test_debug_and_completion_go_to_the_typer_app(golden_env: dict[str, str], tmp_path: Path) -> None:
    """With `CACHETOOL_DEBUG=1` the traceback a user reports is the Typer app's; at a TAB
    (`_CACHETOOL_COMPLETE`) the Typer app completes, as it always has."""
    probe = tmp_path / "probe"
    light, typer = _both(["ls", "--cache-dir", MISSING], {**golden_env, "CACHETOOL_DEBUG": "1"}, probe)
    assert "typer" in probe.read_text().split(",")
    assert light[0] == typer[0] == 1 and "CacheNotFound" in light[2].splitlines()[-1]
    tab = {
        **golden_env,
        "_CACHETOOL_COMPLETE": "complete_bash",
        "COMP_WORDS": "cachetool l",
        "COMP_CWORD": "1",
    }
    light, typer = _both([], tab, probe)
    assert light == typer and light[1].split() == ["ls", "lineage"]


@pytest.mark.slow
def test_ls_json_imports_no_typer_click_pydantic_or_rich(golden_env: dict[str, str], tmp_path: Path) -> None:
    """`cachetool ls --json` in a pipe starts without Typer, Click, pydantic or Rich."""
    probe = tmp_path / "probe"
    code, out, _ = _run(LIGHT, ["ls", "--json"], {**golden_env, "PROBE": str(probe), "NOW": str(time.time())})
    assert code == 0 and json.loads(out)["entries"]
    assert probe.read_text() == ""


@pytest.mark.slow
def test_a_name_that_is_not_utf8_is_an_unknown_fingerprint(
    golden_env: dict[str, str], tmp_path: Path
) -> None:
    """A name the shell passes as bytes that are not UTF-8 (`cachetool show $'\\xff\\xfe'`) names
    no entry of a cache with a ledger: one `Error:` line and exit 2, as any unknown name, on both
    paths, for every command that takes a name (not a traceback from the ledger's index)."""
    probe = tmp_path / "probe"
    env = {**golden_env, "NOW": str(time.time())}
    typer_app = _Forks(TYPER_WARM, env, tmp_path)
    light_path = _Forks(LIGHT_WARM, {**env, "PROBE": str(probe)}, tmp_path)
    try:
        for name in ("f0\udce9", "\udcff\udcfe"):  # how Python hands such an argument on
            for command in ("show", "lineage", "explain"):
                probe.unlink(missing_ok=True)
                light = light_path.answer([command, name])
                typer = typer_app.answer([command, name])
                assert light == typer, (command, name, light, typer)
                assert "typer" not in probe.read_text().split(","), command
                code, out, err = light
                assert (code, out) == (2, "") and err.startswith("Error: ") and err.count("\n") == 1, light
            for args in (["pin", name], ["unpin", name], ["gc", name], ["verify", name]):
                code, out, err = typer_app.answer(args)
                assert code == 2 and err.startswith("Error: ") and err.count("\n") == 1, (args, out, err)
    finally:
        typer_app.close()
        light_path.close()


@pytest.mark.slow
def test_a_cache_root_whose_path_is_not_utf8_is_listed(
    golden: dict[str, Any], golden_env: dict[str, str], tmp_path: Path
) -> None:
    """A cache with a ledger in a folder whose name is not UTF-8 (`/data/caf\\xe9/cache`) is
    listed, shown and traced as any other, on both paths (the ledger's index cannot hold such a
    path: it is read without it), not a traceback."""
    import shutil

    root = tmp_path / "caf\udce9" / "cache"
    shutil.copytree(golden["cache"], root, symlinks=True)  # a new folder: its ledger index is made anew
    probe = tmp_path / "probe"
    for args in (["ls", "--json"], ["show", golden["final"]], ["lineage", golden["final"]]):
        light, typer = _both([*args, "--cache-dir", str(root)], golden_env, probe)
        assert light == typer and light[0] == 0 and "Traceback" not in light[2], (args, light[2][-800:])


def _run_stdout_closed(code: str, args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`cachetool ARGS >&-`: the exit code and stderr of a run whose standard output is closed."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    return proc.returncode, proc.stderr


@pytest.mark.slow
def test_a_closed_stdout_is_one_error_line(golden: dict[str, Any], golden_env: dict[str, str]) -> None:
    """`cachetool ls --json >&-` (standard output closed) says so in one `Error:` line and exits
    2 on both paths, for every command that writes to it, instead of a traceback; `run` leaves
    the script's standard output to the script."""
    env = {**golden_env, "NOW": str(time.time())}
    for args in (["ls", "--json"], ["ls"], ["show", golden["final"]], ["lineage", golden["final"]], ["-V"]):
        for code in (LIGHT, TYPER):
            run_env = {**env, "PROBE": os.devnull}
            assert _run_stdout_closed(code, args, run_env) == (
                2,
                "Error: standard output is closed (to discard the output: >/dev/null)\n",
            ), args
    for args in (["dirs"], ["verify"], ["explain", "--last"], ["stats"]):
        assert _run_stdout_closed(TYPER, args, env) == (
            2,
            "Error: standard output is closed (to discard the output: >/dev/null)\n",
        ), args
    # a full disk (`> /dev/full`) and a closed stderr (`2>&-`): the error line, the exit code
    for code in (LIGHT, TYPER):
        run_env = {**env, "PROBE": os.devnull}
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [sys.executable, "-c", code, "--version"], env=run_env, stdout=full, stderr=subprocess.PIPE
            )
        assert (proc.returncode, proc.stderr) == (2, b"Error: No space left on device\n")
        proc = subprocess.run(
            [sys.executable, "-c", code, "ls", "--cache-dir", MISSING],
            env=run_env,
            capture_output=True,
            preexec_fn=lambda: os.close(2),
        )
        assert (proc.returncode, proc.stdout) == (2, b"")
    script = Path(golden["folder"]) / "quiet.py"
    script.write_text("import sys\nsys.exit(0 if sys.stdout is None else 5)\n", encoding="utf-8")
    try:
        assert _run_stdout_closed(LIGHT, ["run", str(script)], {**env, "PROBE": os.devnull}) == (0, "")
    finally:
        script.unlink()


@pytest.mark.slow
def test_a_reader_that_goes_away_ends_a_long_listing_quietly(
    golden_env: dict[str, str], tmp_path: Path
) -> None:
    """`cachetool ls | head -1` on a listing of thousands of entries: the first line, then exit 0
    and nothing on stderr (no BrokenPipeError traceback), on both paths and in every format."""
    from tests.attack.races import synthesize_cache

    root = tmp_path / "cache"
    synthesize_cache(root, 3000)
    env = {**golden_env, "HF_DATASETS_CACHE": str(root), "NOW": str(time.time()), "PROBE": os.devnull}
    for args in (["ls"], ["ls", "--json"], ["ls", "-q"], ["ls", "--sort", "name", "--no-truncate"]):
        for code in (LIGHT, TYPER):
            proc = subprocess.Popen(
                [sys.executable, "-c", code, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert proc.stdout is not None and proc.stderr is not None
            first = proc.stdout.readline()
            proc.stdout.close()
            err = proc.stderr.read()
            assert proc.wait(timeout=120) == 0 and first and err == b"", (args, err[-500:])


# --- the light grammar is read from the declarations of the Typer commands --------------------


def test_the_light_grammar_is_read_from_the_typer_commands() -> None:
    """A command line the light path answers means what it means to the Typer app: its grammar
    (every option of `ls`, `show`, `lineage` and `explain` by name and short name, flag or value,
    repeatable, formats, bounds, defaults, and the arguments) is read from the declarations the
    Typer commands are made from, and `--version`/`-V` are the root's."""
    import importlib

    import typer

    from cachetool.cli import light
    from cachetool.cli.app import app
    from cachetool.cli.common import REQUIRED, params_of

    group = typer.main.get_command(app)
    for name, (module, function, _) in light.COMMANDS.items():
        declared = params_of(getattr(importlib.import_module(f"cachetool.cli.{module}"), function))
        params = group.commands[name].params  # type: ignore[attr-defined]
        assert [p.name for p in params] == list(declared), name
        for p, d in zip(params, declared.values(), strict=True):
            assert tuple(p.opts) == d.flags or not d.flags, (name, p.name)
            assert p.required == (d.default is REQUIRED) and not p.envvar, (name, p.name)
            assert p.default == (None if p.required else d.default), (name, p.name)
            kind = light._kind(d) if d.flags else "argument"
            assert kind != "many" or p.multiple, (name, p.name)
            assert kind != "count" or (p.min, p.max) == (0, None), (name, p.name)
            assert kind != "flag" or (p.is_flag and not p.secondary_opts), (name, p.name)
    version = next(p for p in group.params if p.name == "version")
    assert sorted(version.opts) == ["--version", "-V"] and not version.envvar
    assert not group.context_settings.get("auto_envvar_prefix")


def test_an_option_the_light_path_cannot_read_is_left_to_the_typer_app() -> None:
    """An option read from an environment variable, of several values, with other bounds or on
    by default is marked for the Typer app, which then answers every command line naming it."""
    from dataclasses import replace

    from cachetool.cli.common import params_of
    from cachetool.cli.light import _kind
    from cachetool.cli.ls import ls_command

    params = params_of(ls_command)
    changes = [
        ("sort", {"extra": {**params["sort"].extra, "envvar": "CACHETOOL_SORT"}}),
        ("sort", {"extra": {**params["sort"].extra, "nargs": 2}}),
        ("limit", {"extra": {**params["limit"].extra, "min": 1}}),
        ("as_json", {"default": True}),
        ("as_json", {"flags": ("--json/--no-json",)}),
    ]
    for name, change in changes:
        assert _kind(params[name]) != "typer", name
        assert _kind(replace(params[name], **change)) == "typer", (name, change)


# --- the sink writes what Rich would ----------------------------------------------------------

LINES = [
    "plain ascii",
    "",
    "a\ttab and\tanother",
    "wide 漢字 and emoji 🙂 [bold]not markup[/bold] :smile:",
    "control \x1b[31m red \x07 bell \r return",
    "a long line " + "word " * 40 + "`a command that must not split` " + "x" * 130,
    "  indented " + "more words " * 20,
]


def _written(plain: bool, lines: list[str], table: list[list[str]]) -> str:
    out = Output(OutputFormat.human)
    if not plain:
        assert out.console is not None  # made first: every line goes through Rich
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        for line in lines:
            out.line(line, style="bold")
        out.line(lines[-2], wrap=False)
        out.line(out.path(os.path.expanduser("~/a/b/c/d/e/f/g/h/i/j/k/l/m/n/file.arrow"), 30))
        out.table(None, [("name", "left"), ("size", "right")], table, widths={"name": (4, 12)})
        out.table(None, [("name", "left"), ("n", "right")], table, whole=["name"])
        for title in ("Schema", "Odd", "A title wider than the table", "[b]x[/b]", "at :smile:", " Pad "):
            out.table(title, [("column", "left"), ("n", "right")], table[:2])
            out.table(title, [("name", "left"), ("n", "right")], table, whole=["name"])
    assert out.plain is plain
    return buffer.getvalue()


@pytest.mark.parametrize("columns", ["80", "33"])
def test_plain_lines_are_the_bytes_rich_writes(monkeypatch: pytest.MonkeyPatch, columns: str) -> None:
    """Lines, paths and tables written without Rich (not a terminal) are the bytes Rich writes:
    tabs, wide characters, markup-like and control characters, wrapping, cut and whole cells."""
    for var in ("TTY_COMPATIBLE", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", columns)
    table = [
        ["short", "1"],
        ["a-rather-long-name-that-is-cut", "22"],
        ["漢字の名前です長い", "3"],
        ["t\tab", "4"],
    ]
    assert _written(True, LINES, table) == _written(False, LINES, table)
    narrow = [["cache-1f2e…", "1"], ["…", "22"], ["a-long-name…-that-is-cut", "3"], ["x", "4…"]]
    assert _written(True, LINES, narrow) == _written(False, LINES, narrow)


def test_stderr_lines_are_the_bytes_rich_writes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`Error:`, `Warning:` and `Hint:` lines written without Rich are the bytes Rich writes."""
    from rich.console import Console
    from rich.text import Text

    from cachetool.cli.output import error, hint, warn

    message = "bad \x1b[2J file /x/[red]y[/red]\nsecond line 漢字"
    for write, label in ((error, "Error:"), (warn, "Warning:"), (hint, "Hint:")):
        write(message)
        plain = capsys.readouterr().err
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            Text.assemble((label, "bold"), " ", "bad \\x1b[2J file /x/[red]y[/red]\nsecond line 漢字")
        )
        assert plain == capsys.readouterr().err
