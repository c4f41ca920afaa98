"""Text forms of a `DeterminismReport`: human lines and GitHub Actions annotations (pure functions)."""

from __future__ import annotations

import os
from collections.abc import Callable

from cachetool.determinism.report import Cause, DeterminismReport, Step
from cachetool.fingerprint.diff import ORDER_HINTS, PREDICTABLE_FALLBACK, PREDICTABLE_HINT, Culprit

__all__ = ["github_lines", "human_lines"]


def _short(fp: str | None) -> str:
    return "-" if fp is None else fp[:16]


def _relative(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(".." + os.sep) else rel


def _location(step: Step) -> str:
    return _relative(step.location)


def _what(cause: Cause) -> str:
    step = cause.step
    parts = [step.operation or step.type]
    if step.function:
        parts.append(step.function)
        if step.function_elsewhere and step.function_defined:
            # The function lives elsewhere (a helper module): say where to look.
            parts.append(f"(defined in {_relative(step.function_defined)})")
    elif step.type == "checkpoint":
        parts.append(repr(step.transform))
    return " ".join(parts)


_VARIATIONS = {
    "PYTHONHASHSEED": "depends on PYTHONHASHSEED (a run with an equal hash seed gave the same fingerprint)",
    "every run": "changes on every run (even with an equal hash seed)",
    "cache state": "depends on the cache state: it differs between a run that computed the earlier step "
    "and one that loaded it from the cache (a warm cache hides it; a cold one shows it)",
}


def _step_name(step: Step) -> str:
    what = f"{step.operation} {step.function}" if step.function else step.operation
    split = f" on split {step.split}" if step.split else ""
    return f"step {step.index + 1} ({what}{split} at {_location(step)})"


def _source_lines(cause: Cause) -> list[str]:
    """A source that differs; when its inputs are the same in every run in another order (data
    files, the datasets it concatenates, a generator's paths), what is reordered and the fix."""
    orders = [d for d in cause.source_diffs if d.key in ORDER_HINTS]
    culprits = [c for c in cause.culprits if c.kind in ("order", "set-order")]
    if orders or culprits:
        lines = ["  the same inputs, in another order in each run:"]
        lines += [f"  {d.key}: {' vs '.join(dict.fromkeys(d.values))}" for d in orders]
        lines += [f"  differs: {c.path_str}: {c.values_str}" for c in culprits]
        lines += [f"  hint: {ORDER_HINTS[d.key]}" for d in orders]
        return lines + [f"  hint: {c.hint}" for c in culprits]
    lines = ["  the source dataset differs between runs (no argument differs, the input does):"]
    if cause.columns_differ:
        lines.append(f"  the data given to {cause.step.operation} is built at run time.")
    else:
        lines.append("  an input file rewritten or touched between runs, or data built at run time.")
    lines += [f"  source {d.key}: {' vs '.join(dict.fromkeys(d.values))}" for d in cause.source_diffs]
    lines += [f"  differs: {c.path_str}: {c.values_str}" for c in cause.culprits]
    if cause.step.operation == "load_dataset" or any(
        d.key == "relative_data_dir" for d in cause.source_diffs
    ):
        lines.append(
            "  hint: load_dataset identifies local data files by path and modification time: a file "
            "rewritten before each run (even with the same content) is a new source; write it only "
            "when its content changes."
        )
    return lines


def _random_lines(cause: Cause) -> list[str]:
    said = (
        f"the same in every run ({PREDICTABLE_FALLBACK})"
        if cause.predictable
        else "the cache is never reused"
    )
    lines = [f"  datasets could not hash an argument and used a random fingerprint: {said}"]
    for piece in cause.unpicklable:
        lines.append(f"  cannot pickle: {piece.path_str} {piece.repr}")
        lines.append(f"  error: {piece.error}")
        lines.append(f"  hint: {PREDICTABLE_HINT if cause.predictable else piece.hint}")
    if not cause.unpicklable:
        for error in cause.errors:
            lines.append(f"  error: {error}")
        args = ", ".join(cause.differing_args) or "?"
        lines.append(f"  hint: make '{args}' picklable, or pass new_fingerprint= to the transform")
    return lines


def _origin(cause: Cause) -> str:
    return _step_name(cause.changed_by) if cause.changed_by is not None else "an earlier step"


def _changed_lines(culprit: Culprit) -> list[str]:
    return [f"  changed: {part.path_str}: {part.values_str}" for part in culprit.parts or (culprit,)]


def _state_lines(cause: Cause) -> list[str]:
    subject = (
        "the function's state"
        if "function" in cause.differing_args or not cause.differing_args
        else (f"the state of {', '.join(cause.differing_args)}")
    )
    lines = [
        f"  {subject} differs between a run that computed {_origin(cause)} and one that loaded it "
        "from the cache:",
        "  that step changes an object while it runs, and this step hashes the object again",
    ]
    for culprit in cause.culprits:
        lines += _changed_lines(culprit)
        if culprit.parts and len(culprit.leaves) > len(culprit.parts):
            lines.append(f"  ... and {len(culprit.leaves) - len(culprit.parts)} more changed")
        lines.append(f"  hint: {culprit.hint}")
    return lines


def _argument_lines(cause: Cause) -> list[str]:
    lines = [f"  differing argument(s): {', '.join(cause.differing_args)}"]
    for culprit in cause.culprits:
        if not culprit.parts:
            shown = culprit.values_str
            if len(shown) <= 60:  # fn_kwargs['seed'] (int): 4187 vs 912
                lines.append(f"  culprit: {culprit.path_str}: {shown}")
            else:
                lines.append(f"  culprit: {culprit.path_str}")
                lines.append(f"    {shown}")
            lines.append(f"  hint: {culprit.hint}")
            continue
        lines.append(f"  culprit: {culprit.path_str}")
        lines.append(f"  it differs in {len(culprit.leaves)} places:")
        for part in culprit.parts:
            lines.append(f"  - {part.path_str}: {part.values_str}")
            lines.append(f"    hint: {part.hint}")
        if len(culprit.leaves) > len(culprit.parts):
            lines.append(f"  - ... and {len(culprit.leaves) - len(culprit.parts)} more")
    if not cause.culprits:
        lines.append("  (no hash tree recorded for it: cannot say which part differs)")
    return lines


_BY_KIND: dict[str, Callable[[Cause], list[str]]] = {
    "source": _source_lines,
    "random": _random_lines,
    "cache-state": _state_lines,
    "given": lambda _: [
        "  the fingerprint was given with new_fingerprint= and differs between runs",
        "  hint: derive new_fingerprint from inputs that are the same in every run (not a clock or uuid)",
    ],
    "unexplained": lambda _: [
        "  no recorded argument differs; the difference is in what datasets hashed internally"
    ],
}


def cause_lines(cause: Cause) -> list[str]:
    """The explanation of one cause, as indented lines."""
    fps = " vs ".join(dict.fromkeys(_short(fp) for fp in cause.step.results))
    lines = [f"{_location(cause.step)}  {_what(cause)}: fingerprint {fps}"]
    lines += _BY_KIND.get(cause.kind, _argument_lines)(cause)
    if cause.variation:
        lines.append(f"  {_VARIATIONS[cause.variation]}")
    if cause.cascade:
        noun = "fingerprint differs" if cause.cascade == 1 else "fingerprints differ"
        lines.append(f"  {cause.cascade} downstream {noun} because of this")
    return lines


def unobserved_lines(cause: Cause) -> list[str]:
    """A step every run agrees on that hashes an object an earlier step changed, where every run
    computed that step: a note (not a cause: nothing was observed to differ)."""
    lines = [
        f"{_location(cause.step)}  {_what(cause)}: fingerprint {_short(cause.step.results[0])} in every run",
        f"  note: it hashes an object that {_origin(cause)} changes while it runs, and every run here "
        "computed",
        "  that step: whether a run that loads it from the cache gives the same fingerprint was not seen",
    ]
    return lines + [line for culprit in cause.culprits for line in _changed_lines(culprit)]


def _uncached_lines(report: DeterminismReport) -> list[str]:
    """The note on steps without a persistent cache, worded as `explain` words it."""
    from cachetool.history.explain.answer import UNCACHED_HINT, UNCACHED_TEXT

    uncached = report.uncached
    if not uncached:
        return []
    n = len(uncached)
    lines = [
        "",
        f"note: {n} step{'' if n == 1 else 's'} ran without a persistent cache; "
        f"{'it runs' if n == 1 else 'they run'} again in every run, deterministic or not:",
    ]
    for step, reason in uncached:
        lines.append(f"  {_step_name(step)}: {UNCACHED_TEXT.get(reason, reason)}")
    lines.append(f"  {UNCACHED_HINT}")
    return lines


def human_lines(report: DeterminismReport) -> list[str]:
    """The whole report for a person (the CLI escapes and prints each line)."""
    seeds = ", ".join(str(r.hash_seed) for r in report.runs)
    mode = "isolated caches" if report.isolated else "shared cache"
    if any(r.cold for r in report.runs):
        mode += ", run 1 cold"
    for r in report.runs:
        if r.cache_of is not None:
            mode += f"; run {r.index + 1} on run {r.cache_of + 1}'s cache"
    n = len(report.runs)
    lines = [
        f"{report.script}: {report.verdict} ({n} run{'' if n == 1 else 's'}, PYTHONHASHSEED {seeds}; {mode})"
    ]
    failed = report.failed_run
    if failed is not None:
        how = (
            f"timed out after {failed.duration:.0f} s" if failed.timed_out else f"exited {failed.returncode}"
        )
        tail = (failed.stderr_tail or "").splitlines()
        said = "last lines of its stderr:" if tail else "it wrote nothing to stderr"
        lines.append(f"run {failed.index + 1} (PYTHONHASHSEED={failed.hash_seed}) {how}; {said}")
        lines.extend(f"  | {line}" for line in tail)
        return lines
    analysis = report.analysis
    if analysis is None:
        return lines
    # The steps the user made (datasets' internal ones repeat their caller's fingerprints).
    compared = sum(1 for s in analysis.steps if not s.internal)
    differing = analysis.differing
    for cause in (*analysis.deterministic_causes, *analysis.random_causes):
        lines += ["", *cause_lines(cause)]
    for cause in analysis.masked:
        lines += ["", "also differs on its own (inside the cascade above; it will show once that is fixed):"]
        lines += cause_lines(cause)
    for cause in analysis.unobserved:
        lines += ["", *unobserved_lines(cause)]
    lines.extend(_uncached_lines(report))
    lines.append("")
    summary = f"{compared} fingerprint(s) compared, {differing} differ"
    if analysis.deterministic_causes:
        summary += f"; {len(analysis.deterministic_causes)} cause(s)"
    if analysis.random_causes:
        summary += f"; {len(analysis.random_causes)} random fingerprint(s)"
    downstream = sum(c.cascade for c in analysis.causes)
    if downstream:
        summary += f", {downstream} downstream"
    lines.append(summary)
    if report.exit_code != 0:
        own = ",".join(str(r.hash_seed) for r in report.runs if r.cache_of is None)
        lines.append(f"reproduce: cachetool check-determinism {report.script} --hash-seeds {own}")
    return lines


def github_lines(report: DeterminismReport) -> list[str]:
    """``::error file=...,line=...::message`` workflow commands, one per cause (GitHub Actions)."""
    from cachetool.formatting import annotation

    out: list[str] = []
    failed = report.failed_run
    if failed is not None:
        tail = failed.stderr_tail.splitlines()[-1:] or [""]
        what = "timed out" if failed.timed_out else f"failed (exit {failed.returncode})"
        out.append(
            annotation("error", f"check-determinism: the script {what}: {tail[0]}", file=report.script)
        )
        return out
    analysis = report.analysis
    if analysis is None:
        return out
    if report.nothing_compared is not None:
        return [annotation("error", f"check-determinism: {report.nothing_compared}", file=report.script)]
    for cause in (*analysis.deterministic_causes, *analysis.random_causes):
        title = "random fingerprint" if cause.kind == "random" else "fingerprint not deterministic"
        text = _what(cause) + ": " + ("\n".join(cause_lines(cause)[1:]) or _what(cause)).strip()
        file = os.path.relpath(cause.step.file) if cause.step.file else None
        out.append(annotation("error", text, file=file, line=cause.step.line, title=title))
    if not out:
        out.append(annotation("notice", f"{report.script}: every fingerprint matched"))
    return out
