"""The `cachetool` command: a thin Typer skin over the model.

Each command module keeps its heavy imports (pyarrow, dill, datasets) inside the function body,
and a launched command line imports only the module of the command it names (`_register`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Annotated, Any

import typer

from cachetool import __version__
from cachetool.cli.common import COMMANDS, invoke, params_of

app = typer.Typer(
    name="cachetool",
    help="See, verify and tidy the on-disk cache of Hugging Face `datasets`.\n\n"
    "Start with `cachetool demo` (builds a small real cache and lists it), then `cachetool dirs` "
    "to see where your cache lives and `cachetool ls` to list it.",
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
    abbreviated name, an import by a test or the docs): `cachetool gc` imports gc's modules only.
    At a TAB before a command is named, only the commands' names are completed: their options
    are not read."""
    from cachetool.cli import completing

    if completing():  # the words as bash (COMP_WORDS), zsh and fish (Typer's variable) give them
        argv = (os.environ.get("COMP_WORDS") or os.environ.get("_TYPER_COMPLETE_ARGS") or "").split()[1:]
    elif not sys.argv[0].endswith(("cachetool", "__main__.py")):
        argv = []  # imported, not launched
    named = argv[0] if argv[:1] and argv[0] in COMMANDS else None
    for name, (module, function) in COMMANDS.items():
        if named in (None, name):
            func = getattr(importlib.import_module(f"cachetool.cli.{module}"), function)
            callback = TyperCallback(func, bare=completing() and named is None)
            app.command(name, cls=HelpCommand, context_settings=func.cli[1])(callback)


_register(sys.argv[1:])


def _summary(doc: str | None) -> str:
    """A command's first paragraph on one line, without markdown backticks."""
    first = (doc or "").strip().split("\n\n", 1)[0]
    return " ".join(first.split()).replace("`", "")


def root_help(width: int) -> str:
    """`cachetool --help` as plain text, each command's summary whole (Click's cuts it short with
    `...`), without building every command's Click object first (the most asked-for help)."""
    import textwrap

    width = max(40, min(width, 100))
    lines = ["Usage: cachetool [OPTIONS] COMMAND [ARGS]...", ""]
    for para in (app.info.help or "").split("\n\n"):
        lines += textwrap.wrap(
            " ".join(para.split()).replace("`", ""), width - 2, initial_indent="  ", subsequent_indent="  "
        )
        lines.append("")
    options = [
        ("-V, --version", "Print the version and exit."),
        ("--install-completion", "Install completion for the current shell."),
        (
            "--show-completion",
            "Show completion for the current shell, to copy it or customize the installation.",
        ),
        ("-h, --help", "Show this message and exit."),
    ]
    commands = [
        (c.name or "", _summary(c.callback.__doc__ if c.callback else None)) for c in app.registered_commands
    ]
    for title, rows in (("Options", options), ("Commands", commands)):
        lines.append(f"{title}:")
        left = max(len(name) for name, _ in rows) + 4
        for name, text in rows:
            wrapped = textwrap.wrap(text, max(20, width - left)) or [""]
            lines.append(f"  {name:<{left - 2}}{wrapped[0]}")
            lines += [" " * left + more for more in wrapped[1:]]
        lines.append("")
    lines.append("Run `cachetool COMMAND --help` for a command's options and examples.")
    return "\n".join(lines) + "\n"


def main() -> None:
    """The Typer app with nothing in front (the console script is `cachetool.cli.entry.main`)."""
    from cachetool.cli import closed_stdout, completing

    argv = sys.argv[1:]
    code = closed_stdout(argv)
    if code is not None:
        sys.exit(code)
    if argv in (["--help"], ["-h"], []) and not completing():
        import shutil

        sys.stdout.write(root_help(shutil.get_terminal_size().columns))
        sys.exit(0 if argv else 2)  # no arguments: help, and the usage exit code, as before
    sys.exit(app(prog_name="cachetool"))
