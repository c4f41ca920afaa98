"""Every hint is a command that does what it says when pasted; gc says when a named entry stays,
and an empty selection is nothing to do."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cachetool.hints import gc_command
from tests import forks
from tests.attack.damaged_arrow import damaged_folder
from tests.attack.races import SLOW_MAP, synthesize_cache
from tests.builders.killing import killed_run
from tests.conftest import hf_env

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "cachetool"]


def _cli(args: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
    return forks.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=300, **kw)


def _paste(hint: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a hint as a shell would (its quoting), answering its prompt with --yes."""
    words = shlex.split(hint)
    assert words[0] == "cachetool", hint
    return _cli([*words[1:], *(["--yes"] if words[1] == "gc" else [])], env)


def test_the_leftover_hint_after_a_sigkill_removes_the_leftover(tmp_path: Path) -> None:
    """A map SIGKILLed mid-write leaves a tmp file a second old: verify's hint, pasted, removes
    it (before, `cachetool gc --temp` kept it for an hour and removed nothing)."""
    env = hf_env(tmp_path)
    cache = Path(env["HF_DATASETS_CACHE"])

    def tmp_files() -> list[Path]:
        return [Path(d) / n for d, _, names in os.walk(cache) for n in names if n.startswith("tmp")]

    old = dict(os.environ)
    try:
        os.environ.update(env)
        killed_run(SLOW_MAP, str(tmp_path / "x.csv"), ready=lambda: bool(tmp_files()))
    finally:
        os.environ.clear()
        os.environ.update(old)
    (leftover,) = tmp_files()
    doc = json.loads(_cli(["verify", "--json", "--cache-dir", str(cache)], env).stdout)
    (finding,) = [f for f in doc["findings"] if f["path"] == str(leftover)]
    assert finding["severity"] == "warning" and finding["hint"]
    pasted = _paste(finding["hint"], env)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    assert not leftover.exists()
    again = json.loads(_cli(["verify", "--json", "--cache-dir", str(cache)], env).stdout)
    assert again["counts"]["warning"] == 0, again["findings"]


def test_a_named_entry_gc_keeps_is_exit_1_with_the_reason_and_the_hint_removes_it(tmp_path: Path) -> None:
    """`cachetool gc <fp>` of an entry written a minute ago: kept by the default --min-age, so exit
    1 with the reason (before: "Nothing to remove" and exit 0). The stale-hit hint's command
    (`gc <fp> --min-age 0 --cache-dir …`) removes it."""
    env = hf_env(tmp_path)
    root = tmp_path / "cache"
    (young,) = synthesize_cache(root, 1, age=60)
    fp = young.name[len("cache-") : -len(".arrow")]
    kept = _cli(["gc", fp, "-y", "--cache-dir", str(root)], env)
    assert kept.returncode == 1, kept.stdout + kept.stderr
    assert f"Error: {fp} was named but kept: " in kept.stderr and "--min-age" in kept.stderr
    assert young.exists()
    pasted = _paste(gc_command(root, fp), env)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    assert not young.exists()


def test_the_ls_hint_verifies_the_folder_that_was_listed(tmp_path: Path) -> None:
    """`ls <folder>` with a damaged file hints at verify; pasted, the hint verifies that folder
    (not the default cache) and names the file."""
    env = hf_env(tmp_path)
    root = tmp_path / "elsewhere"
    files = damaged_folder(root)
    listing = _cli(["ls", str(root)], env)
    line = next(x for x in listing.stderr.splitlines() if x.startswith("Hint:"))
    hint = line.split("`")[1]
    pasted = _cli([*shlex.split(hint)[1:], "--json"], env)
    assert pasted.returncode == 1
    named = {Path(f["path"]).name for f in json.loads(pasted.stdout)["findings"]}
    assert {p.name for p in files.values()} <= named


def test_an_empty_selection_is_nothing_to_do(tmp_path: Path) -> None:
    """`gc $(cachetool ls -q --filter "used>30d") --dry-run` when nothing matches exits 0 and says
    so; a real usage error (an unknown fingerprint, a bad size) is still exit 2."""
    env = hf_env(tmp_path)
    root = tmp_path / "cache"
    synthesize_cache(root, 2, age=60)
    env["HF_DATASETS_CACHE"] = str(root)
    cron = subprocess.run(
        ["bash", "-c", f'{shlex.join(CLI)} gc $({shlex.join(CLI)} ls -q --filter "used>30d") --dry-run'],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cron.returncode == 0, cron.stderr
    assert "nothing to do" in cron.stderr
    assert _cli(["gc", "zzzz", "--dry-run"], env).returncode == 2
    assert _cli(["gc", "--max-size", "12 parsecs", "--dry-run"], env).returncode == 2


def test_the_stale_entry_hint_removes_the_entry(tmp_path: Path) -> None:
    """A pipeline run twice under `cachetool run` with an edited helper: `verify --stale` reports
    the stale entries, and the command in each hint, pasted, removes that entry although it was
    written minutes ago (before, `cachetool gc <fp>` kept it: "younger than --min-age", exit 0)."""
    from tests.explain_pipeline import explain_runs

    runs = explain_runs(tmp_path / "explain")
    env = runs.env
    doc = json.loads(_cli(["verify", "--stale", "--json", "--cache-dir", str(runs.cache)], env).stdout)
    stale = [f for f in doc["findings"] if f["kind"] == "stale"]
    assert stale
    for finding in stale:
        command = finding["hint"].split("`")[1]
        assert command.startswith(f"cachetool gc {finding['entry']} --min-age 0 --cache-dir "), command
        pasted = _paste(command, env)
        assert pasted.returncode == 0, pasted.stdout + pasted.stderr
        assert not Path(finding["path"]).exists()


def test_a_hint_never_breaks_inside_a_command_whose_path_holds_a_backtick(tmp_path: Path) -> None:
    """A cache in a folder whose name holds a backtick and spaces, with damaged files, at 80
    columns: every hint of `verify` (stdout) and `ls` (stderr on a terminal) holds its command
    whole on one line, quoted as a shell needs it, so it pastes as printed (before, `verify` broke
    the line at a space inside the quoted path, and `ls` shortened the path inside the command)."""
    import pty
    import re

    root = tmp_path / "odd `name with spaces" / "cache"
    damaged_folder(root)
    env = {**hf_env(tmp_path), "COLUMNS": "80"}
    quarantine = shlex.join(["cachetool", "verify", "--quarantine", "--cache-dir", str(root)])
    report = _cli(["verify", "--cache-dir", str(root)], env)
    assert report.returncode == 1, report.stderr
    lines = [x for x in report.stdout.splitlines() if "hint:" in x]
    assert lines and all(f"`{quarantine}`" in x for x in lines), report.stdout

    verify = shlex.join(["cachetool", "verify", "--cache-dir", str(root)])
    master, slave = pty.openpty()
    try:
        listing = subprocess.run(
            [*CLI, "ls", str(root)], env=env, stdout=subprocess.PIPE, stderr=slave, timeout=300
        )
        os.close(slave)
        slave = -1
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end is closed and everything was read
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert listing.returncode == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode())  # the terminal's styles, the status line
    (line,) = [x[x.index("Hint:") :] for x in text.splitlines() if "Hint:" in x]
    assert f"`{verify}`" in line, line
