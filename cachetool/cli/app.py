"""The `cachetool` command: a thin Typer skin over the model.

Command modules are imported here to register their commands; each keeps its heavy imports
(pyarrow, dill, datasets) inside the function body, so `cachetool --help` and `--version` stay light.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cachetool import __version__

app = typer.Typer(
    name="cachetool",
    help="See, verify and tidy the on-disk cache of Hugging Face `datasets`.\n\n"
    "Start with `cachetool demo` (builds a small real cache and lists it), then `cachetool dirs` "
    "to see where your cache lives and `cachetool ls` to list it.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"cachetool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """See, verify and tidy the on-disk cache of Hugging Face `datasets`."""


def _register() -> None:
    from cachetool.cli import demo, dirs, ls, show

    app.command("ls")(ls.ls_command)
    app.command("show")(show.show_command)
    app.command("dirs")(dirs.dirs_command)
    app.command("demo")(demo.demo_command)

    from cachetool.cli import verify

    app.command("verify")(verify.verify_command)

    from cachetool.cli import check_determinism

    app.command("check-determinism")(check_determinism.check_determinism_command)

    from cachetool.cli import lineage, run

    app.command("run", context_settings=run.CONTEXT_SETTINGS)(run.run_command)
    app.command("lineage")(lineage.lineage_command)

    from cachetool.cli import gc, pin

    app.command("gc")(gc.gc_command)
    app.command("pin")(pin.pin_command)
    app.command("unpin")(pin.unpin_command)

    from cachetool.cli import explain, stats

    app.command("explain")(explain.explain_command)
    app.command("stats")(stats.stats_command)

    from cachetool.cli import report

    app.command("report")(report.report_command)


_register()


def main() -> None:
    """Console-script entry point."""
    sys.exit(app(prog_name="cachetool"))
