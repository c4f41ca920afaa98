"""`python -m build` makes an sdist and a wheel that install and run, with the completions."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import cachetool
from tests.conftest import copy_checkout

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_installs_and_runs_with_its_completions(tmp_path: Path) -> None:
    """The wheel (built from the sdist, as `python -m build` does) installs, its `cachetool`
    prints the version from `cachetool.__version__`, and the shells find its completions."""
    src = tmp_path / "src"
    copy_checkout(src)  # the project's files, not the gigabytes of .nox/ or caches beside them
    # The build tools write caches and toolchain settings into HOME: give them one of their own.
    build_env = {**os.environ, "HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "build", "-o", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
        env=build_env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("cachetool-*.whl"))
    assert next((tmp_path / "dist").glob("cachetool-*.tar.gz"))
    assert wheel.name.startswith(f"cachetool-{cachetool.__version__}-")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert not [n for n in names if n.startswith("tests/")]
    prefix = tmp_path / "prefix"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--ignore-installed",
            "--prefix",
            str(prefix),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=build_env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    site = next(prefix.glob("lib/python*/site-packages"))
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [str(prefix / "bin" / "cachetool"), "--version"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.stdout.strip() == f"cachetool {cachetool.__version__}", proc.stderr
    for rel, name in [
        ("share/bash-completion/completions", "cachetool.bash"),
        ("share/zsh/site-functions", "_cachetool"),
        ("share/fish/vendor_completions.d", "cachetool.fish"),
    ]:
        shipped = prefix / rel / name
        assert shipped.read_text() == (ROOT / "completions" / name).read_text()
