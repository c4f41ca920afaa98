"""The `cachetool` command: a thin Typer skin over the model.

Each command module keeps its heavy imports (pyarrow, dill, datasets) inside the function body,
and a launched command line imports only the module of the command it names (`_register`).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from cachetool import __version__
from cachetool.cli.common import COMMANDS, invoke, params_of

app = typer.Typer(
    name="cachetool",
    help="See, verify and tidy the on-disk cache of Hugging Face datasets.\n\n"
    "Start with cachetool demo (builds a small real cache and lists it), then cachetool dirs "
    "to see where your cache lives and cachetool ls to list it.",
    epilog="Run cachetool COMMAND --help for a command's options and examples.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain Click help: Rich's panels cut long values, show `<bool>` type placeholders and read
    # `<root>` in help text as markup; `HelpCommand` renders the docstrings as plain text instead.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:  # `> /dev/full`: one error line
        raise typer.Exit(invoke(typer.echo, {"message": f"cachetool {__version__}"}))


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """See, verify and tidy the on-disk cache of Hugging Face `datasets`."""


class HelpCommand(typer.core.TyperCommand):
    """A command whose `--help` is plain text at most 80 columns wide: the docstring's paragraphs
    reflowed, its indented example blocks kept line by line, markdown marks (`**`, backticks)
    dropped, and a name for every value (`--jobs N`, `FINGERPRINTS...`) instead of a type."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for p in self.params:
            if isinstance(p, typer.core.TyperArgument):
                p.metavar = p.metavar or (p.name or "value").upper()
                p.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
            elif isinstance(p, typer.core.TyperOption) and not p.is_flag and not p.count:
                p.metavar = p.metavar or (p.name or "value").upper().strip("_")

    def format_help_text(self, ctx: Any, formatter: Any) -> None:
        text = inspect.cleandoc(self.help or "").replace("**", "").replace("`", "")
        for block in text.split("\n\n"):
            formatter.write_paragraph()
            with formatter.indentation():
                lines = block.splitlines()
                if all(line.startswith("    ") for line in lines):  # an example: as written
                    for line in lines:
                        formatter.write(f"{'':>{formatter.current_indent}}{line}\n")
                else:
                    formatter.write_text(block)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super().format_help(ctx, formatter)
        formatter.buffer[:] = [piece.replace("`", "") for piece in formatter.buffer]


class TyperCallback:
    """The Typer command of `func`: its declared parameters as Typer's (read when Typer builds the
    command, not when it is registered), its docstring as help, `func` run behind the error
    boundary and its exit code the command's."""

    __annotations__ = {}  # Typer reads the types from the signature

    def __init__(self, func: Any, bare: bool = False) -> None:
        self.func, self.__doc__, self.bare = func, func.__doc__, bare  # bare: no parameters

    def __call__(self, **values: Any) -> None:
        code = invoke(self.func, values)
        if code:
            raise typer.Exit(code)

    @property
    def __signature__(self) -> inspect.Signature:
        parameters = []
        for name, p in {} if self.bare else params_of(self.func).items():
            info = (
                typer.Option(*p.flags, help=p.help, **p.extra)
                if p.flags
                else typer.Argument(help=p.help, **p.extra)
            )
            kind = inspect.Parameter.KEYWORD_ONLY
            parameters.append(
                inspect.Parameter(name, kind, default=p.default, annotation=Annotated[p.type, info])
            )
        return inspect.Signature(parameters)


def _register(argv: list[str]) -> None:
    """Registers the command a launched command line names (its first word: the root's own
    options all exit), or a TAB's words, else every command (`--help`, a TAB, an unknown or
    abbreviated name, an import by a test or the docs): `cachetool gc` imports gc's modules only,
    `cachetool --version` none. The root's help and a TAB before a command is named read each
    command's name and summary (its docstring's first paragraph, whole), not its options."""
    from cachetool.cli import completing

    launched = sys.argv[0].endswith(("cachetool", "__main__.py"))
    if completing():  # the words as bash (COMP_WORDS), zsh and fish (Typer's variable) give them
        argv = (os.environ.get("COMP_WORDS") or os.environ.get("_TYPER_COMPLETE_ARGS") or "").split()[1:]
    elif not launched:
        argv = []
    if launched and argv[:1] in (["--version"], ["-V"]) and not completing():
        return  # eager: it prints and exits before a command is looked up
    named = argv[0] if argv[:1] and argv[0] in COMMANDS else None
    bare = named is None and (completing() or (launched and argv in (["--help"], ["-h"])))
    for name, (module, function, _) in COMMANDS.items():
        if named in (None, name):
            func = getattr(importlib.import_module(f"cachetool.cli.{module}"), function)
            summary = " ".join((func.__doc__ or "").split("\n\n", 1)[0].split()).replace("`", "")
            short = None if completing() else summary  # a TAB's menus keep Click's short form
            app.command(name, cls=HelpCommand, context_settings=func.cli[1], short_help=short)(
                TyperCallback(func, bare=bare)
            )


_register(sys.argv[1:])


def closed_stdout(argv: Sequence[str]) -> int | None:
    """The exit code of a command started with its standard output closed (`cachetool ls >&-`):
    one `Error:` line instead of a traceback at the first line written, and nothing done.
    None when stdout is open, for `run` (the script's stdout is the script's) and at a TAB. A
    closed stderr becomes /dev/null: messages are lost, exit codes are not, and no file the
    command opens takes its place."""
    from cachetool.cli import completing

    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    if sys.stdout is not None or argv[:1] == ["run"] or completing():
        return None
    from cachetool.cli.output import error
    from cachetool.errors import ExitCode

    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (what the error line flushes first)
    error("standard output is closed (to discard the output: >/dev/null)")
    return int(ExitCode.USAGE)


def main() -> None:
    """The Typer app (behind `cachetool.cli.entry.main`, the console script)."""
    from cachetool.cli import completing

    argv = sys.argv[1:]
    code = closed_stdout(argv)
    if code is not None:
        sys.exit(code)
    if not argv and not completing():  # no arguments: the help (on stdout), and the usage exit code
        with contextlib.suppress(SystemExit):
            app(["--help"], prog_name="cachetool")
        sys.exit(2)
    sys.exit(app(prog_name="cachetool"))
