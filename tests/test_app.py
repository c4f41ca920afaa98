"""The command line as a whole: startup cost, help with examples, completions, version."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cachetool import __version__
from cachetool.cli.app import app
from cachetool.cli.docs import SHELLS, completion_script
from tests import forks

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pyarrow", "dill", "datasets", "xxhash", "humanize")


def command_names() -> list[str]:
    group = typer.main.get_command(app)
    assert hasattr(group, "commands")
    return sorted(group.commands)  # type: ignore[attr-defined]


def test_version_and_module_entry_point() -> None:
    proc = subprocess.run([sys.executable, "-m", "cachetool", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == f"cachetool {__version__}\n"


def test_version_imports_no_command() -> None:
    """`cachetool --version` prints and exits before a command is looked up: no command's module
    (nor what it imports to read its options) is imported."""
    code = (
        "import atexit, json, runpy, sys\n"
        "cli = lambda: sorted(m for m in sys.modules if m.startswith('cachetool.cli.'))\n"
        "atexit.register(lambda: print(json.dumps(cli())))\n"
        "runpy.run_module('cachetool', run_name='__main__', alter_sys=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True, text=True)
    version, imported = proc.stdout.splitlines()
    assert proc.returncode == 0 and version == f"cachetool {__version__}"
    assert json.loads(imported) == [
        "cachetool.cli.app",
        "cachetool.cli.common",
        "cachetool.cli.entry",
        "cachetool.cli.output",
    ]


@pytest.mark.parametrize("argv", [["--help"], ["--version"], *([name, "--help"] for name in command_names())])
def test_help_and_version_import_nothing_heavy(argv: list[str]) -> None:
    """`cachetool --help` stays light: no pyarrow, dill, xxhash or datasets at startup."""
    code = (
        "import sys\n"
        f"sys.argv = ['cachetool', *{argv!r}]\n"
        "from cachetool.cli.app import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY="


def test_every_command_has_help_with_an_examples_block() -> None:
    runner = CliRunner()
    names = command_names()
    assert {"ls", "show", "dirs", "demo"} <= set(names)
    for name in names:
        result = runner.invoke(app, [name, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, name
        assert "Examples" in result.stdout, f"`cachetool {name} --help` has no Examples block"
        assert f"cachetool {name}" in result.stdout


def complete(words: str) -> list[str]:
    """Drive completion the way bash does when TAB is pressed."""
    env = {
        **os.environ,
        "_CACHETOOL_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    proc = forks.run([sys.executable, "-m", "cachetool"], env=env, capture_output=True, text=True)
    return proc.stdout.split()


def test_completion_offers_real_command_and_option_names() -> None:
    assert sorted(complete("cachetool d")) == ["demo", "dirs"]
    assert complete("cachetool ls --so") == ["--sort"]
    assert "--cache-dir" in complete("cachetool show --")
    if "verify" in command_names():
        assert complete("cachetool v") == ["verify"]


def test_completion_scripts_are_current() -> None:
    for shell, name in SHELLS.items():
        path = ROOT / "completions" / name
        assert path.read_text() == completion_script(shell), (
            f"{path} is stale: run python -m cachetool.cli.docs"
        )


def test_demo_without_datasets_says_how_to_install_it(tmp_path: Path) -> None:
    """`sys.modules["datasets"] = None` is how Python itself marks a module as not importable."""
    code = (
        "import sys\nsys.modules['datasets'] = None\n"
        f"sys.argv = ['cachetool', 'demo', {str(tmp_path / 'demo')!r}]\n"
        "from cachetool.cli.app import main\nmain()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        'Error: datasets is not installed; install it with: pip install "cachetool[datasets]"'
    )


def test_root_help_is_plain_lists_every_command_and_skips_rich() -> None:
    """`cachetool --help` answers without Rich (the most asked-for help is the cheapest), names
    every command with its summary whole at the terminal's width, and exits 0; bare `cachetool`
    prints the same help with the usage exit code 2."""
    code = (
        "import sys\n"
        "sys.argv = ['cachetool', *sys.argv[1:]]\n"
        "from cachetool.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
        "print('RICH=' + str('rich' in sys.modules), code, file=sys.stderr)\n"
    )
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True, env=env)
    assert proc.stderr.strip() == "RICH=False 0"
    lines = proc.stdout.splitlines()
    assert lines[0] == "Usage: cachetool [OPTIONS] COMMAND [ARGS]..."
    assert max(len(line) for line in lines) <= 80
    commands = lines[lines.index("Commands:") + 1 :]
    listed = [line.split()[0] for line in commands[: commands.index("")] if line[2] != " "]
    assert sorted(listed) == command_names()
    assert "report Write one self-contained HTML page that pictures the cache. merge" in " ".join(
        proc.stdout.split()
    )
    bare = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert bare.stdout == proc.stdout and bare.stderr.strip() == "RICH=False 2"


def test_an_empty_cache_dir_is_a_usage_error_for_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--cache-dir ''` (an unset variable in a script) never means the current folder: every
    command that takes the option stops with exit 2 and says it is empty, and removes nothing."""
    import typer

    from cachetool.cli.app import app

    (tmp_path / "tmpabcdefgh").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    group = typer.main.get_command(app)
    runner = CliRunner()
    checked = []
    for name, cmd in sorted(group.commands.items()):  # type: ignore[attr-defined]
        if not any("--cache-dir" in p.opts for p in cmd.params):
            continue
        args = [name, "--cache-dir", ""]
        if name in ("show", "lineage", "pin", "unpin"):
            args.append("abc")
        if name == "gc":
            args += ["--temp", "--min-age", "0s", "-y"]
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 2, (name, result.output)
        assert "is empty" in result.output, (name, result.output)
        checked.append(name)
    assert {"ls", "gc", "verify", "show", "stats"} <= set(checked)
    assert (tmp_path / "tmpabcdefgh").exists()


def test_every_help_is_plain_text_that_fits_80_columns() -> None:
    """`cachetool CMD --help` at 80 columns: no line wider, no `<bool>`/`<list[str]>` type
    placeholders, no markdown marks, every `<…>` written in an option's help shown as written,
    and every default shown whole."""
    runner = CliRunner()
    group = typer.main.get_command(app)
    for name in command_names():
        result = runner.invoke(app, [name, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, name
        text = result.stdout
        too_wide = [line for line in text.splitlines() if len(line) > 80]
        assert not too_wide, (name, too_wide)
        for placeholder in ("<bool>", "<list[", "<str>", "<int", "<float>", "<path>", "**", "`", "╭"):
            assert placeholder not in text, (name, placeholder)
        flat = " ".join(text.split())
        cmd = group.commands[name]  # type: ignore[attr-defined]
        for p in cmd.params:
            for marked in re.findall(r"<[^>]+>", getattr(p, "help", None) or ""):
                assert marked in flat, (name, p.name, marked)
            shown = getattr(p, "show_default", True) and not isinstance(p.default, bool)
            if shown and isinstance(p.default, (str, int, float)) and p.default:
                default = getattr(p.default, "value", p.default)
                assert f"[default: {default}]" in flat or f"default: {default};" in flat, (name, p.name)


def test_every_result_command_takes_format_json_and_quiet() -> None:
    """Every command that prints results takes `--format human|json|quiet` (plus its own extra
    formats), `--json` and `-q`, spelled and explained the same way everywhere."""
    group = typer.main.get_command(app)
    without = {"run", "demo"}  # run prints the script's output; demo prints a fixed walk-through
    for name, cmd in sorted(group.commands.items()):  # type: ignore[attr-defined]
        if name in without:
            continue
        opts = {o: p for p in cmd.params for o in p.opts}
        assert {"--format", "--json", "-q"} <= set(opts), name
        choices = opts["--format"].metavar.split("|")
        assert choices[:3] == ["human", "json", "quiet"], (name, choices)
        assert opts["--json"].help == "Same as --format json.", name
        assert opts["-q"].help == "Same as --format quiet.", name


@pytest.mark.parametrize("name", ["lineage", "verify", "check-determinism"])
def test_format_refuses_another_commands_format(name: str) -> None:
    """A format a command does not have (`ls --format dot`, `lineage --format github`) is a usage
    error naming the ones it has."""
    result = CliRunner().invoke(app, ["ls", "--format", "dot"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "'dot' is not one of human, json, quiet" in result.output
    extra = {"lineage": "github", "verify": "dot", "check-determinism": "mermaid"}[name]
    args = [name, "x.py" if name == "check-determinism" else "abc", "--format", extra]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2 and f"'{extra}' is not one of human, json, quiet" in result.output


def test_the_confirmation_prompt_needs_no_separate_click() -> None:
    """`gc` and `verify --quarantine` ask through Typer's own Click: with no `click` package
    installed (Typer bundles its own; only some `datasets` installs bring one) the prompt works."""
    code = (
        "import sys\n"
        "sys.modules['click'] = None  # as if not installed: importing it fails\n"
        "from cachetool.cli.common import confirm\n"
        "print(confirm('Remove 1 item(s)?'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], input="y\n", capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("True")
