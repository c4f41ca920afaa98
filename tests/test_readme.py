"""The promises README.md makes: its two commands, its command reference, and CI running them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from cachetool.cli.docs import END, START, command_reference
from tests.conftest import copy_checkout

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def fenced_commands() -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", README, re.S)]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    test_command = next(c for c in fenced_commands() if "pytest" in c and "venv" in c)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()


def test_command_reference_is_generated_from_the_app() -> None:
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    block = text.split(START, 1)[1].split(END, 1)[0]
    assert block.strip() == command_reference().strip(), "run: python -m cachetool.cli.docs docs/commands.md"


def test_readme_is_a_front_door_with_working_links() -> None:
    """README stays short, and every relative link in it and in docs/ points at a file that exists."""
    assert len(README.splitlines()) <= 310
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def test_every_command_has_a_guide() -> None:
    """Each command is named in the title of a page in docs/ (besides the generated reference)."""
    from cachetool.cli.docs import _commands

    titles = " ".join(
        p.read_text(encoding="utf-8").splitlines()[0]
        + " "
        + " ".join(line for line in p.read_text(encoding="utf-8").splitlines() if line.startswith("## "))
        for p in (ROOT / "docs").glob("*.md")
        if p.name != "commands.md"
    )
    missing = [
        name for name, _ in _commands() if f"`cachetool {name}`" not in titles and f"`{name}`" not in titles
    ]
    assert not missing


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("CACHETOOL_FRESH_INSTALL"),
    reason="a fresh install of cachetool and datasets: `nox -s compat` runs it (5.2 on Python 3.11)",
)
def test_readme_demo_command_works_as_written(tmp_path: Path) -> None:
    """On a copy of the checkout: make a venv, install, run `cachetool demo`. It installs
    `datasets` and its dependencies afresh (a minute and more), as the compat sessions do: it runs
    with them, in the session of the newest line on the suite's Python."""
    demo_command = next(c for c in fenced_commands() if "cachetool demo" in c)
    copy_checkout(tmp_path)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "CACHETOOL_", "VIRTUAL_ENV", "PYTHON"))
    }
    # As a new user runs it, with no CACHETOOL_* set, but in a home of its own: the suite never
    # writes into the real home folder (cachetool's state lands in <home>/.local/state/cachetool).
    env["TMPDIR"] = str(tmp_path)
    env["HOME"] = str(tmp_path / "home")
    proc = subprocess.run(
        ["bash", "-c", demo_command], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "shards 2/2" in proc.stdout and "source" in proc.stdout and "indices" in proc.stdout


def test_every_command_section_links_its_guide() -> None:
    """Each command's section in docs/commands.md links a guide in docs/ that names the command."""
    from cachetool.cli.common import COMMANDS

    for name, (_, _, page) in COMMANDS.items():
        guide = (ROOT / "docs" / page).read_text(encoding="utf-8")
        assert f"`cachetool {name}" in guide or f"`{name}`" in guide, f"{page} never names {name}"
