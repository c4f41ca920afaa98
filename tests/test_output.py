"""The human output of every command, whole, on the golden cache (see `golden` in conftest.py).

Each test runs a command as a user would and compares everything it printed (stdout, stderr, exit
code) with `tests/output/<command>.txt`. Only what must vary between sessions is masked: times,
ages and durations, the run id (host, pid, start), the session's temp folder and the file system
type; runs of spaces are compared as one column gap (an age of `9s` or `10s` widens a column).

After a deliberate change of output, rewrite the files and review them with `git diff`:

    CACHETOOL_UPDATE_OUTPUT=1 pytest tests/test_output.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import hf_env, invoke

pytestmark = pytest.mark.slow

OUTPUT = Path(__file__).parent / "output"

_MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?(?:\.\d+)?(?:\+00:00|Z)?"), "<time>"),
    (re.compile(r"\b[\w.-]+-\d+-\d{8}T\d{6}\.\d{6}Z\b"), "<run>"),
    (re.compile(r"\b\d+(?:mo|[smhdwy]) ago\b"), "<age> ago"),
    (re.compile(r"\b(?:a|an|\d+) (?:second|minute|hour|day|week|month|year)s? ago\b"), "<age> ago"),
    (re.compile(r"\((?:just )?now\)"), "(<age> ago)"),
    (re.compile(r"(?<![\w.])\d+(?:\.\d+)? ?(?:ms|s)\b"), "<duration>"),
    (re.compile(r"/tmp/ct-[0-9a-f]{12}\b"), "<tmpdir>"),
    # a lock named after its folder's path (`datasets` replaces each / by _)
    (re.compile(r"_tmp_ct-golden-\w{8}_cache_"), "<cache>_"),
]
_FILE_SYSTEMS = re.compile(r"\b(?:ext[234]|tmpfs|xfs|btrfs|zfs|overlay|nfs4?|fuse\.\w+|apfs)\b")


def mask(text: str, folders: dict[str, str | os.PathLike[str]]) -> str:
    """`text` with what varies between sessions replaced by `<...>` (each of `folders` by its
    name, the longest first), column gaps made one width, and a table title's centring undone."""
    for name, folder in sorted(folders.items(), key=lambda kv: -len(os.fspath(kv[1]))):
        text = re.sub(re.escape(os.fspath(folder)) + r"(?![\w.-])", name, text)
    for pattern, token in _MASKS:
        text = pattern.sub(token, text)
    text = _FILE_SYSTEMS.sub("<fs>", text)
    lines = [
        re.sub(r"(?<=\S) {2,}", "  ", re.sub(r"^ {10,}", "  ", line.rstrip())) for line in text.splitlines()
    ]
    return "\n".join(lines)


def transcript(
    runs: list[tuple[list[str], int, str, str]], folders: dict[str, str | os.PathLike[str]]
) -> str:
    """Per command: `$ cachetool ARGS`, its stdout, its stderr (each line `! `) and its exit code
    unless 0; the output masked, the command as written."""
    parts = []
    for args, code, stdout, stderr in runs:
        parts.append("$ cachetool " + " ".join(args))
        if stdout.strip():
            parts.append(mask(stdout, folders))
        if stderr.strip():
            parts += [f"! {line}" for line in mask(stderr, folders).splitlines()]
        if code:
            parts.append(f"[exit {code}]")
    return "\n".join(parts) + "\n"


def check(name: str, actual: str) -> None:
    """`actual` equals tests/output/<name>.txt, or with CACHETOOL_UPDATE_OUTPUT=1 becomes it."""
    path = OUTPUT / f"{name}.txt"
    if os.environ.get("CACHETOOL_UPDATE_OUTPUT") == "1":
        OUTPUT.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        pytest.fail(f"rewrote tests/output/{name}.txt: review it with git diff")
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"the output of {name} changed (tests/output/{name}.txt)"


def run_commands(golden: dict[str, Any], *commands: list[str], columns: int = 200) -> str:
    """The transcript of `commands` run in this process on the golden cache (`{cache}`, and
    `{final}` for the first 8 digits of its final fingerprint), wide enough that no path or run
    id (whose length varies) is shortened or wrapped."""
    runs = []
    for command in commands:
        args = [a.format(cache="<cache>", final=golden["final"][:8]) for a in command]
        real = [a.replace("<cache>", golden["cache"]) for a in args]
        result = invoke(*real, env=golden["env"], columns=columns)
        runs.append((args, result.exit_code, result.stdout, result.stderr))
    return transcript(runs, {"<cache>": golden["cache"], "<base>": golden["base"]})


def run_process(args: list[str], base: Path, **kwargs: Any) -> str:
    """The transcript of `python -m cachetool ARGS` in a process of its own, its temp folder
    `base` (masked as `<tmp>`), at 200 columns."""
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", *args],
        env={**hf_env(base), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=600,
        **kwargs,
    )
    shown = [a.replace(str(base), "<tmp>") for a in args]
    return transcript([(shown, proc.returncode, proc.stdout, proc.stderr)], {"<tmp>": base})


def test_ls(golden: dict[str, Any]) -> None:
    """`ls`: the entries by dataset folder, with kind, rows, size, recorded operation and parent."""
    check("ls", run_commands(golden, ["ls", "{cache}"], ["ls", "{cache}", "--filter", "kind=indices"]))


def test_show(golden: dict[str, Any]) -> None:
    """`show`: an entry's files (with their fingerprint check), schema and recorded steps."""
    check("show", run_commands(golden, ["show", "{final}", "--cache-dir", "{cache}"]))


def test_lineage(golden: dict[str, Any]) -> None:
    """`lineage`: the chain of steps from the csv load to the final map, and the saved copy."""
    check("lineage", run_commands(golden, ["lineage", "{final}", "--cache-dir", "{cache}"]))


def test_verify(golden: dict[str, Any]) -> None:
    """`verify` of a sound cache: one line, exit 0."""
    check("verify", run_commands(golden, ["verify", "--cache-dir", "{cache}"]))


def test_gc(golden: dict[str, Any]) -> None:
    """`gc --dry-run`: nothing for `--temp`; every derived entry for `--older-than 0s`, with why."""
    check(
        "gc",
        run_commands(
            golden,
            ["gc", "--temp", "--dry-run", "--cache-dir", "{cache}"],
            ["gc", "--older-than", "0s", "--min-age", "0", "--dry-run", "--cache-dir", "{cache}"],
        ),
    )


def test_pin(golden: dict[str, Any]) -> None:
    """`pin`, `pin --list` and `unpin` (the cache is as before at the end)."""
    try:
        actual = run_commands(
            golden,
            ["pin", "{final}", "--cache-dir", "{cache}"],
            ["pin", "--list", "--cache-dir", "{cache}"],
            ["unpin", "{final}", "--cache-dir", "{cache}"],
            ["unpin", "{final}", "--cache-dir", "{cache}"],
        )
    finally:
        invoke("unpin", golden["final"], "--cache-dir", golden["cache"], env=golden["env"])
    check("pin", actual)


def test_explain(golden: dict[str, Any]) -> None:
    """`explain --last` and `explain FINGERPRINT` after the first run: everything computed, why."""
    check(
        "explain",
        run_commands(
            golden,
            ["explain", "--last", "--cache-dir", "{cache}"],
            ["explain", "{final}", "--cache-dir", "{cache}"],
        ),
    )


def test_stats(golden: dict[str, Any]) -> None:
    """`stats`: one run of six misses, per call site and per dataset."""
    check("stats", run_commands(golden, ["stats", "--cache-dir", "{cache}"]))


def test_dirs(golden: dict[str, Any]) -> None:
    """`dirs` in the golden environment: every location and where its value came from."""
    check("dirs", run_commands(golden, ["dirs"], ["dirs", "--cache-dir", "{cache}"], columns=200))


def test_report(golden: dict[str, Any], tmp_path: Path) -> None:
    """`report`: the one line saying what the page holds."""
    out = tmp_path / "report.html"
    actual = run_commands(golden, ["report", "-o", str(out), "--cache-dir", "{cache}"])
    check("report", re.sub(r"\(\d+\.\d [kM]B\)", "(<size>)", actual.replace(str(tmp_path), "<out>")))


def test_run(golden: dict[str, Any]) -> None:
    """`run`: the pipeline's own output, nothing added (it prints its final fingerprint)."""
    proc = golden["run"]
    runs = [(["run", "pipeline.py"], proc.returncode, proc.stdout, proc.stderr)]
    check("run", transcript(runs, {"<base>": golden["base"]}))


def test_check_determinism(golden: dict[str, Any], tmp_path: Path) -> None:
    """`check-determinism` of the pipeline: two runs, every fingerprint equal."""
    script = shutil.copy(golden["folder"] / "pipeline.py", tmp_path / "pipeline.py")
    check("check-determinism", run_process(["check-determinism", str(script)], tmp_path, cwd=tmp_path))
