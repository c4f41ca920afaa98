"""The command line at the process boundary, as a user meets it in a shell: names and roots that
are not UTF-8, a closed or full standard stream, a reader that goes away (`| head`), what a
listing in a pipe imports; and the plain lines the output sink writes without Rich, which must
be the bytes Rich writes.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from cachetool.cli.output import Output, OutputFormat
from tests import forks

CLI = [*forks.CLI]
MISSING = "/nonexistent/cache"
#: `python -m cachetool` that writes `imported rich` on stderr as it ends if it imported Rich.
NOTING_RICH = [
    sys.executable,
    "-c",
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: 'rich' in sys.modules and sys.stderr.write('imported rich'))\n"
    "runpy.run_module('cachetool', run_name='__main__', alter_sys=True)\n",
]
CLOSED = "Error: standard output is closed (to discard the output: >/dev/null)\n"


@pytest.fixture(scope="module")
def golden_env(golden: dict[str, Any]) -> Iterator[dict[str, str]]:
    env = {**golden["env"], "COLUMNS": "120"}
    env.pop("CACHETOOL_DEBUG", None)
    yield env


@pytest.mark.slow
def test_a_name_that_is_not_utf8_is_an_unknown_fingerprint(golden_env: dict[str, str]) -> None:
    """A name the shell passes as bytes that are not UTF-8 (`cachetool show $'\\xff\\xfe'`) names
    no entry of a cache with a ledger: one `Error:` line and exit 2, as any unknown name, for
    every command that takes a name (not a traceback from the ledger's index)."""
    for name in ("f0\udce9", "\udcff\udcfe"):  # how Python hands such an argument on
        for command in ("show", "lineage", "explain", "pin", "unpin", "gc", "verify"):
            proc = forks.run([*CLI, command, name], env=golden_env, capture_output=True, text=True)
            code, out, err = proc.returncode, proc.stdout, proc.stderr
            assert (code, out) == (2, "") and err.startswith("Error: ") and err.count("\n") == 1, (
                command,
                err,
            )


@pytest.mark.slow
def test_a_cache_root_whose_path_is_not_utf8_is_listed(
    golden: dict[str, Any], golden_env: dict[str, str], tmp_path: Path
) -> None:
    """A cache with a ledger in a folder whose name is not UTF-8 (`/data/caf\\xe9/cache`) is
    listed, shown and traced as any other, not a traceback."""
    import shutil

    root = tmp_path / "caf\udce9" / "cache"
    shutil.copytree(golden["cache"], root, symlinks=True)
    for args in (["ls", "--json"], ["show", golden["final"]], ["lineage", golden["final"]]):
        proc = forks.run(
            [*CLI, *args, "--cache-dir", str(root)], env=golden_env, capture_output=True, text=True
        )
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr[-800:])


def _run_stdout_closed(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """`cachetool ARGS >&-`: the exit code and stderr of a run whose standard output is closed."""
    proc = subprocess.run(
        [*CLI, *args], env=env, stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1)
    )
    return proc.returncode, proc.stderr


@pytest.mark.slow
def test_a_closed_stdout_is_one_error_line(golden: dict[str, Any], golden_env: dict[str, str]) -> None:
    """`cachetool ls --json >&-` (standard output closed) says so in one `Error:` line and exits
    2, for every command that writes to it, instead of a traceback; a full disk (`> /dev/full`)
    and a closed stderr (`2>&-`) keep the error line or the exit code; `run` leaves the script's
    standard output to the script."""
    final = golden["final"]
    lines = (["ls", "--json"], ["ls"], ["show", final], ["lineage", final], ["-V"], ["dirs"], ["verify"])
    for args in (*lines, ["explain", "--last"], ["stats"]):
        assert _run_stdout_closed(args, golden_env) == (2, CLOSED), args
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*CLI, "--version"], env=golden_env, stdout=full, stderr=subprocess.PIPE)
    assert (proc.returncode, proc.stderr) == (2, b"Error: No space left on device\n")
    proc = subprocess.run(
        [*CLI, "ls", "--cache-dir", MISSING],
        env=golden_env,
        capture_output=True,
        preexec_fn=lambda: os.close(2),
    )
    assert (proc.returncode, proc.stdout) == (2, b"")
    script = Path(golden["folder"]) / "quiet.py"
    script.write_text("import sys\nsys.exit(0 if sys.stdout is None else 5)\n", encoding="utf-8")
    try:
        assert _run_stdout_closed(["run", str(script)], golden_env) == (0, "")
    finally:
        script.unlink()


@pytest.mark.slow
def test_a_reader_that_goes_away_ends_a_long_listing_quietly(
    golden_env: dict[str, str], tmp_path: Path
) -> None:
    """`cachetool ls | head -1` on a listing of thousands of entries: the first line, then exit 0
    and nothing on stderr (no BrokenPipeError traceback), in every format; a listing in a pipe
    (`--json`, `-q`, the human table of plain text) imports no Rich."""
    from tests.attack.races import synthesize_cache

    root = tmp_path / "cache"
    synthesize_cache(root, 3000)
    env = {**golden_env, "HF_DATASETS_CACHE": str(root)}
    for args in (["ls"], ["ls", "--json"], ["ls", "-q"], ["ls", "--sort", "name", "--no-truncate"]):
        proc = subprocess.Popen(
            [*NOTING_RICH, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 0 and first and err == b"", (args, err[-500:])


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
