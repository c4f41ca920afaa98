"""Conventions every command shares with `hf cache`: one JSON envelope, `accessed` for `used`,
durations with units, pins that can be listed and seen, output that fits 80 columns."""

from __future__ import annotations

import json
import os
import pty
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cachetool.cli.app import app

runner = CliRunner()
HASH = "7067e4b2422ab4b7d61ccf25eb67c03d0df17a5264a8fa53f4593051b5adb555"


def invoke(*args: str, columns: int = 120, **env: str | None) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": str(columns), **env}, catch_exceptions=False)


# -- paths for people ----------------------------------------------------------------------


# -- durations -----------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--older-than", "--min-age"])
def test_a_duration_without_a_unit_is_refused_with_a_hint(tmp_path: Path, option: str) -> None:
    """`gc --older-than 30` could mean 30 days or 30 seconds: it is a usage error asking which,
    and nothing is removed. `--min-age 0` needs no unit."""
    (tmp_path / "tmpabcdefgh").write_bytes(b"x")
    result = invoke("gc", "--cache-dir", str(tmp_path), "--temp", option, "30", "-y")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"Error: invalid {option} '30': '30' needs a unit: 30d (days)? 30h (hours)? 30s (seconds)? "
        "(units: s, m, h, d, w, mo, y)"
    )
    assert (tmp_path / "tmpabcdefgh").exists()
    ok = invoke("gc", "--cache-dir", str(tmp_path), "--temp", "--min-age", "0", "--dry-run", "--json")
    assert ok.exit_code == 0, ok.output


@pytest.mark.slow
def test_an_error_line_fits_the_terminal(tmp_path: Path) -> None:
    """On an 80-column terminal an error stays one line that fits: the path in it is shortened
    from the middle, its last name whole."""
    missing = tmp_path.joinpath(*[f"folder-{i}" for i in range(12)], "datasets")
    master, slave = pty.openpty()
    import fcntl
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "CACHETOOL_DEBUG")}
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", "ls", "--cache-dir", str(missing)],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
        timeout=60,
    )
    os.close(slave)
    err = os.read(master, 65536).decode()
    os.close(master)
    assert proc.returncode == 2
    import re

    plain = re.sub(r"\x1b\[[0-9;]*m", "", err).strip()
    assert len(plain.splitlines()) == 1 and len(plain) <= 80, plain
    assert plain.startswith("Error: cache directory not found: ") and plain.endswith("/folder-11/datasets")
    assert "…" in plain


# -- on a real cache -----------------------------------------------------------------------


@pytest.mark.slow
class TestOnRealCache:
    def test_accessed_is_used(self, real_cache: dict[str, Any]) -> None:
        """`accessed` (the `hf cache` key) filters and sorts exactly as `used`."""
        cache = real_cache["cache"]
        for a, b in (("accessed>0s", "used>0s"), ("accessed<100y", "used<100y")):
            assert invoke("ls", cache, "-q", "-f", a).stdout == invoke("ls", cache, "-q", "-f", b).stdout
        by_used = invoke("ls", cache, "-q", "--sort", "used:asc").stdout
        assert invoke("ls", cache, "-q", "--sort", "accessed:asc").stdout == by_used and by_used

    def test_every_json_document_starts_with_version(self, real_cache: dict[str, Any]) -> None:
        """One envelope: `version` first, then the command's fields, in every command."""
        cache, fp = real_cache["cache"], real_cache["csv_source"]
        commands = [
            ["ls", cache],
            ["show", fp, "--cache-dir", cache],
            ["lineage", fp, "--cache-dir", cache],
            ["verify", fp, "--cache-dir", cache],
            ["stats", "--cache-dir", cache],
            ["dirs", "--cache-dir", cache],
            ["pin", "--list", "--cache-dir", cache],
            ["gc", "--temp", "--dry-run", "--cache-dir", cache],
        ]
        for args in commands:
            for flag in (["--json"], ["--format", "json"]):
                result = invoke(*args, *flag)
                doc = json.loads(result.stdout)
                assert next(iter(doc)) == "version" and doc["version"] == 1, args

    def test_show_and_ls_fit_80_columns_with_names_whole(self, real_cache: dict[str, Any]) -> None:
        """At 80 columns `show`'s file table and `ls` never split a file name or a fingerprint."""
        cache, fp = real_cache["cache"], real_cache["shards"]
        shown = invoke("show", fp, "--cache-dir", cache, columns=80).stdout
        names = [f"cache-{fp}_0000{i}_of_00002.arrow" for i in range(2)]
        for name in names:
            assert any(line.split()[:1] == [name] for line in shown.splitlines()), (name, shown)
        assert max(len(line.rstrip()) for line in shown.splitlines()) <= 80
        entries = json.loads(invoke("ls", cache, "--json").stdout)["entries"]
        fingerprints = [e["fingerprint"] for e in entries if e["fingerprint"]]
        assert len(fingerprints) > 10
        for args in ([], ["--sort", "size"]):  # grouped by dataset, and one flat table
            listing = invoke("ls", cache, *args, columns=80).stdout
            assert max(len(line.rstrip()) for line in listing.splitlines()) <= 80, listing
            assert all(f in listing for f in fingerprints), listing
            assert "…" not in "".join(line.split()[1] for line in listing.splitlines() if fp in line)


@pytest.mark.slow
def test_run_shows_the_script_in_ps(tmp_path: Path) -> None:
    """`ps` shows a pipeline started with `cachetool run` by its script and arguments (as
    `python prepare.py --rows 10` would), not as `python -c import sys; …`."""
    from tests.conftest import cachetool_run, hf_env

    (tmp_path / "prepare.py").write_text(
        "import os, subprocess\n"
        "ps = ['ps', '-ww', '-o', 'args=', '-p', str(os.getpid())]\n"
        "print(subprocess.run(ps, capture_output=True, text=True).stdout.strip())\n",
        encoding="utf-8",
    )
    proc = cachetool_run("prepare.py", "--rows", "10", env=hf_env(tmp_path), cwd=tmp_path, timeout=60)
    shown = proc.stdout.strip()
    assert shown.endswith(" prepare.py --rows 10"), shown
    assert " -c " not in shown and "import" not in shown, shown


def test_exit_codes_are_documented_once_and_every_help_uses_them() -> None:
    """docs/exit-codes.md is the one table: every `ExitCode` with its number and name, every
    command in the per-command table; each command's `--help` has an `Exit codes:` line naming
    only codes from it, and the command reference links the table for each command."""
    import re

    import typer

    from cachetool.errors import ExitCode

    root = Path(__file__).resolve().parents[1]
    table = (root / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    for code in ExitCode:
        assert f"| {int(code)} | `{code.name}` |" in table, code
    group = typer.main.get_command(app)
    for name in group.commands:  # type: ignore[attr-defined]
        assert f"`{name}`" in table.split("Per command:")[1], name
        text = " ".join(invoke(name, "--help", columns=200).stdout.split())
        line = text.split("Exit codes:", 1)[1].split(".")[0] if "Exit codes:" in text else ""
        assert line, f"`cachetool {name} --help` names no exit codes"
        assert {int(n) for n in re.findall(r"\b(\d+) ", line)} <= {int(c) for c in ExitCode}, (name, line)
    reference = (root / "docs" / "commands.md").read_text(encoding="utf-8")
    assert reference.count("All exit codes: [exit-codes.md](exit-codes.md)") == len(group.commands)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_gc_plan_at_80_columns_names_every_item_whole(real_cache: dict[str, Any]) -> None:
    """`gc --dry-run` at 80 columns: every line fits, and every item's name (hash-named folders
    and downloads included) appears whole, with its kind, size and reason."""
    args = ["gc", "--temp", "--min-age", "0", "--dry-run", "--cache-dir", real_cache["cache"]]
    doc = json.loads(invoke(*args, "--json").stdout)
    names = [Path(i["path"]).name for i in doc["plan"]["items"] if not i["fingerprint"]]
    assert any(len(n) > 40 for n in names), names  # a hash-named leftover is among them
    human = invoke(*args, columns=80).stdout
    # Only a name wider than the terminal by itself stands alone on a longer line.
    wide = [line.strip() for line in human.splitlines() if len(line.rstrip()) > 80]
    assert all(line in names and len(line) > 78 for line in wide), (wide, human)
    for name in names:
        assert name in human, (name, human)


@pytest.fixture(scope="module")
def traced_cache(golden: dict[str, Any]) -> dict[str, Any]:
    """`cachetool demo`'s cache: a pipeline of six steps recorded by `cachetool run`."""
    cache = golden["cache"]
    final = json.loads(invoke("ls", cache, "--json", "--filter", "kind=shards").stdout)["entries"][0]
    return {"cache": cache, "final": final["fingerprint"]}


@pytest.mark.slow
def test_quiet_prints_ids_that_compose(traced_cache: dict[str, Any]) -> None:
    """`-q` prints one id a line in the commands that gained it: `lineage` the chain's
    fingerprints (source first), `explain` the explained steps', `stats` the hit rate alone,
    `verify` the entries with errors (none on a sound cache, the broken one after damage)."""
    cache, final = traced_cache["cache"], traced_cache["final"]
    chain = invoke("lineage", final, "--cache-dir", cache, "-q").stdout.split()
    doc = json.loads(invoke("lineage", final, "--cache-dir", cache, "--json").stdout)
    assert chain == [s["fingerprint"] for s in doc["steps"]] and len(chain) == 6 and chain[-1] == final
    explained = invoke("explain", "--last", "--cache-dir", cache, "-q").stdout.split()
    assert final in explained and set(explained) <= set(chain)
    assert invoke("stats", "--cache-dir", cache, "-q").stdout == "0\n"  # six misses, no hit
    assert json.loads(invoke("stats", "--cache-dir", cache, "--format", "json").stdout)["misses"] == 6
    sound = invoke("verify", "--cache-dir", cache, "-q")
    assert (sound.exit_code, sound.stdout) == (0, "")
    victim = chain[1]
    path = Path(json.loads(invoke("show", victim, "--cache-dir", cache, "--json").stdout)["path"])
    data, st = path.read_bytes(), path.stat()
    path.write_bytes(data[: st.st_size // 2])
    try:
        broken = invoke("verify", "--cache-dir", cache, "-q")
    finally:  # the demo cache is shared by the session's tests: put the file back as it was
        path.write_bytes(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (broken.exit_code, broken.stdout) == (1, f"{victim}\n")


def test_a_long_report_line_wraps_at_spaces_at_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    """A long human line (as check-determinism, verify and explain print them) wraps at spaces
    to 80 columns with an indent; the path in it stays on one line, whole."""
    from cachetool.cli.output import Output, OutputFormat

    path = f"/srv/projects/pipelines/{HASH}/prepare_dataset_for_training.py:118"
    line = f"  hint: load_dataset identifies local data files by path and modification time: {path} rewritten"
    Output(OutputFormat.human, width=80).line(line)
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "  hint: load_dataset identifies local data files by path and modification time:",
        f"    {path}",
        "    rewritten",
    ]


def test_generated_markdown_shows_every_angle_bracket() -> None:
    """In docs/commands.md and docs/api.md a `<root>` outside backticks is escaped, so Markdown
    does not read it as an HTML tag and swallow it."""
    import re

    root = Path(__file__).resolve().parents[1] / "docs"
    for page in ("commands.md", "api.md"):
        for line in (root / page).read_text(encoding="utf-8").splitlines():
            if line.startswith(("    ", "<!--")):
                continue
            outside = "".join(line.split("`")[0::2])
            assert not re.search(r"<[A-Za-z/]", outside), (page, line)


def test_ls_counts_a_narrow_kind_column_at_its_minimum_width(capsys: pytest.CaptureFixture[str]) -> None:
    """At 80 columns, rows of short kinds (`derived`, `saved`) with op and parent fit on one line:
    the kind column is drawn at least 10 wide, so columns give way as if it were (it used to be
    counted at 7, and rows wrapped into `parent` cells split over two lines)."""
    import time

    from cachetool.cache.layout import Kind
    from cachetool.cache.model import CacheFile, CacheReport, Entry
    from cachetool.cli.ls import _entry_table
    from cachetool.cli.output import Output, OutputFormat

    now = time.time()
    entries = [
        Entry(
            kind=kind,
            path=Path(f"/c/{fp}"),
            files=(CacheFile(Path(f"/c/{fp}/f"), 5_100, now - 14), CacheFile(Path(f"/c/{fp}/g"), 5, now)),
            fingerprint=fp,
            operation=op,
            parent=parent,
            last_used=now - 13,
        )
        for kind, fp, op, parent in [
            (Kind.DERIVED, "c0ca74525869d691", "map", "f28b7fcd1e2a3b4c"),
            (Kind.SAVED, "a7d4f5b7ca742fec", None, None),
        ]
    ]
    report = CacheReport(Path("/c"), (), tuple(entries), (), now)
    _entry_table(Output(OutputFormat.human, width=80), report, entries, with_dataset=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 3, lines  # the header and one line per entry
    assert all(len(line.rstrip()) <= 80 for line in lines), lines
    assert lines[1].split()[-2:] == ["map", "f28b7fcd"], lines
