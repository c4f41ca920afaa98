"""`cachetool check-determinism`: run a pipeline twice, compare every fingerprint, name the culprit."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cachetool.cli.common import JsonOption, QuietOption, format_option, handle_errors
from cachetool.cli.output import Output, OutputFormat, choose_format

if TYPE_CHECKING:
    from cachetool.determinism.report import DeterminismReport, RunProgress

#: Options after the script that check-determinism does not know go to the script.
CONTEXT_SETTINGS = {"ignore_unknown_options": True}


# Long only by its Typer options and its --help text (the docstring): the work is one call.
def check_determinism_command(
    script: Annotated[Path, typer.Argument(help="The pipeline script to run.", show_default=False)],
    script_args: Annotated[
        list[str] | None,
        typer.Argument(
            help="Arguments for the script, after it, as with `cachetool run`. Options check-determinism "
            "knows are its own: put script arguments that clash with them after `--`.",
            show_default=False,
        ),
    ] = None,
    runs: Annotated[int, typer.Option("--runs", "-n", min=2, help="How many runs to compare.")] = 2,
    hash_seeds: Annotated[
        str | None,
        typer.Option(
            "--hash-seeds",
            help="Comma-separated PYTHONHASHSEED values, one per run (sets the number of runs). "
            "Default: 1,2,...",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds a run may take before it is stopped (0: no limit).")
    ] = 900.0,
    isolated: Annotated[
        bool,
        typer.Option(
            "--isolated",
            help="Give each run a fresh temporary HF_DATASETS_CACHE (removed afterwards). Default: "
            "the cache the script uses anyway. Either way the runs go one after the other.",
        ),
    ] = False,
    cold: Annotated[
        bool,
        typer.Option(
            "--cold/--no-cold",
            help="Make the first run compute every step (what the cache lacks it writes there, "
            "for the next run to load), so a step that changes an object a later step hashes "
            "is found on a warm cache too. --no-cold: faster on a large warm cache, but such a "
            "change goes unseen.",
        ),
    ] = True,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="With --isolated: runs at once, for a script that writes no file outside its cache "
            "(a save_to_disk folder written by two runs at once can kill one). Default: 1.",
            show_default=False,
        ),
    ] = None,
    fmt: Annotated[
        OutputFormat, format_option("github", quiet="the call sites (file:line) that differ, one a line")
    ] = OutputFormat.human,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Run a pipeline script several times with different PYTHONHASHSEED values, compare every
    fingerprint `datasets` computes, and explain the first one that differs.

    The report names the call site (file:line), the operation and function, the hashed arguments
    that differ and, inside them, the culprit found by diffing the runs' hash trees, e.g.
    `function → closure 'stop' (frozenset of 12 str)`, with a hint to fix it. Later fingerprints
    that differ only because of it are counted as its cascade. `cachetool.checkpoint(name, obj)`
    in any script adds its own values to the comparison.

    The first run computes every step (what the cache lacks it writes there, files the cache
    holds it leaves alone), so a step that changes an
    object a later step hashes (a tokenizer configured inside the mapped function, a vocabulary
    built on the first call) is named even when the cache is warm: "the function's state differs
    between a run that computed step N and one that loaded it from the cache". On a large warm
    cache `--no-cold` saves that recomputation and leaves such changes unseen.

    Exit codes: 0 every fingerprint matched; 1 a fingerprint differs; 2 the script failed, timed
    out, or the usage was wrong (the tail of its stderr is shown); 3 the only differences come
    from `datasets` falling back to a random fingerprint (an argument cannot be pickled, so that
    cache is never reused; the report names the object and the exception).

    **Examples**

        cachetool check-determinism prepare.py

        cachetool check-determinism prepare.py --split train --max-rows 1000

        cachetool check-determinism prepare.py -- --runs 3

        cachetool check-determinism prepare.py --hash-seeds 1,2

        cachetool check-determinism prepare.py --isolated --runs 3 --timeout 300

        cachetool check-determinism prepare.py --no-cold

        cachetool check-determinism prepare.py --format github
    """
    code = _check(
        script,
        script_args or [],  # `args` of check_determinism; named for the help and the reference
        runs=runs,
        hash_seeds=hash_seeds,
        timeout=timeout,
        isolated=isolated,
        jobs=jobs,
        cold=cold,
        fmt=choose_format(fmt, as_json, quiet),
    )
    raise typer.Exit(code)


@handle_errors
def _check(
    script: Path,
    args: list[str],
    *,
    runs: int,
    hash_seeds: str | None,
    timeout: float,
    isolated: bool,
    jobs: int | None,
    cold: bool,
    fmt: OutputFormat,
) -> int:
    """`check_determinism` with the same keywords (the seeds as typed: ``1,2``), its report shown."""
    import sys

    from cachetool.determinism.check import CheckOptions, check_determinism

    options = CheckOptions(script, args, runs, _parse_seeds(hash_seeds), timeout, isolated, jobs, cold=cold)
    progress = _Progress(sys.stderr) if sys.stderr.isatty() else None
    report = check_determinism(**vars(options), progress=progress)
    _show(report, fmt)
    return int(report.exit_code)


class _Progress:
    """One status line on a terminal (stderr) while the runs go: which run, steps seen so far."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.shown = 0
        self.lock = threading.Lock()

    def __call__(self, run: RunProgress) -> None:
        state = "done" if run.finished else "running"
        cold = ", cold" if run.cold else ""
        text = (
            f"check-determinism: run {run.index + 1} (PYTHONHASHSEED={run.hash_seed}{cold}) {state}, "
            f"{run.steps} step(s) seen, {run.elapsed:.0f} s"
        )
        with self.lock:
            pad = " " * max(0, self.shown - len(text))
            self.stream.write("\r" + text + pad + ("\n" if run.finished else ""))
            self.stream.flush()
            self.shown = 0 if run.finished else len(text)


def _parse_seeds(text: str | None) -> list[int] | None:
    from cachetool.errors import CachetoolError

    if text is None:
        return None
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CachetoolError(f"invalid --hash-seeds '{text}': expected integers like 1,2") from None
    if len(seeds) < 2:
        raise CachetoolError(f"invalid --hash-seeds '{text}': give at least two seeds")
    return seeds


def _show(report: DeterminismReport, fmt: OutputFormat) -> None:
    import sys

    from cachetool.cli.output import warn
    from cachetool.determinism.render import github_lines, human_lines

    for message in report.warnings:
        warn(message)
    if fmt == OutputFormat.json:
        Output(fmt).json(report.to_dict())
    elif fmt == OutputFormat.quiet:
        a = report.analysis
        causes = (*a.deterministic_causes, *a.random_causes) if a is not None else ()
        Output(fmt).ids(dict.fromkeys(c.step.location for c in causes))
    elif fmt == OutputFormat.github:
        for line in github_lines(report):
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
    else:
        out = Output(OutputFormat.human)
        for line in human_lines(report):
            out.line(line)  # wrapped at spaces: paths and reprs are never cut
