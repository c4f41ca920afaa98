"""`cachetool check-determinism`: run a pipeline twice, compare every fingerprint, name the culprit."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from cachetool.cli.common import command, output
from cachetool.cli.output import Output, OutputFormat, warn

if TYPE_CHECKING:
    from collections.abc import Callable

    from cachetool.determinism.verdict import RunProgress


@command(
    {"ignore_unknown_options": True},  # options after the script it does not know go to the script
    "cachetool.determinism.check.CheckOptions",
    "script script_args runs hash_seeds timeout isolated cold jobs fmt as_json quiet",
    **output("github", quiet="the call sites (file:line) that differ, one a line"),
)
def check_determinism_command(
    script_args: list[str] | None, hash_seeds: str | None, out: Output, **keywords: Any
) -> int:
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

    Exit codes: 0 every fingerprint matched; 1 a fingerprint differs, or a random fallback gave
    every run the same one (datasets < 2.17 after random.seed); 2 the script failed, timed
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
    import sys

    from cachetool.determinism.check import CheckOptions, check_determinism
    from cachetool.determinism.verdict import github_lines, human_lines

    # `script_args` is `args` of check_determinism, named for the help and the reference
    options = CheckOptions(args=script_args or [], hash_seeds=_parse_seeds(hash_seeds), **keywords)
    report = check_determinism(
        **vars(options), progress=_progress(sys.stderr) if sys.stderr.isatty() else None
    )
    warn(*report.warnings)
    a = report.analysis
    causes = (*a.deterministic_causes, *a.random_causes) if a is not None else ()
    if out.format == OutputFormat.github:
        sys.stdout.writelines(line + "\n" for line in github_lines(report))
        sys.stdout.flush()
    elif not out.emit(report.to_dict, dict.fromkeys(c.step.location for c in causes)):
        for line in human_lines(report):
            out.line(line)  # wrapped at spaces: paths and reprs are never cut
    return int(report.exit_code)


def _progress(stream: Any) -> Callable[[RunProgress], None]:
    """One status line on a terminal (stderr) while the runs go: which run, steps seen so far."""
    shown, lock = [0], threading.Lock()

    def show(run: RunProgress) -> None:
        state = "done" if run.finished else "running"
        cold = ", cold" if run.cold else ""
        text = (
            f"check-determinism: run {run.index + 1} (PYTHONHASHSEED={run.hash_seed}{cold}) {state}, "
            f"{run.steps} step(s) seen, {run.elapsed:.0f} s"
        )
        with lock:
            pad = " " * max(0, shown[0] - len(text))
            stream.write("\r" + text + pad + ("\n" if run.finished else ""))
            stream.flush()
            shown[0] = 0 if run.finished else len(text)

    return show


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
