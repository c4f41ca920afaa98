"""The `datasets` versions cachetool is tested on: one session per release line.

    nox -s compat                          # every line, on each supported Python the machine has
    nox -s "compat(python='3.11', datasets='2.21')"  # one line on one Python

Each session installs cachetool and one `datasets` release (with the numpy, pyarrow, fsspec and
huggingface_hub that release works with) into its own environment and runs tests/compat: a real
pipeline under `cachetool run`, then `ls`, `lineage`, `verify --deep`, `gc --temp`, `explain` and
`check-determinism`. The session of the newest line on Python 3.11 also runs README's
install-and-demo command on a copy of the checkout (tests/test_readme.py). The full suite runs on
the newest line (`pip install -e ".[test]"`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
# Each Python the machine has runs; one it lacks is skipped and named in nox's summary (also in
# CI, where nox would otherwise fail on a missing interpreter).
nox.options.error_on_missing_interpreters = False

#: The Python versions cachetool supports (requires-python and the classifiers say the same).
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


def _pyenv_versions() -> None:
    """Where pyenv manages the interpreters, its `pythonX.Y` shims answer only for the versions
    selected: select every installed one, so each supported Python the machine has is found."""
    if os.environ.get("PYENV_VERSION") or not shutil.which("pyenv"):
        return
    try:
        found = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return
    current = "{}.{}.".format(*sys.version_info[:2])
    wanted = [v for v in found.stdout.split() if any(v.startswith(p + ".") for p in PYTHONS)]
    # The running interpreter's version first: it is the one plain `python3` keeps meaning.
    versions = sorted(wanted, key=lambda v: not v.startswith(current))
    if versions:
        os.environ["PYENV_VERSION"] = ":".join(versions)


_pyenv_versions()

#: datasets line -> the release tested. Older lines predate numpy 2, pyarrow's removal of
#: `PyExtensionType` and huggingface_hub 1.0: the libraries each works with are the extra
#: `datasets-<line>` of pyproject.toml (what users install too), else the plain `datasets` extra.
DATASETS = {"2.14": "2.14.7", "2.21": "2.21.0", "3.6": "3.6.0", "4.8": "4.8.5", "5.2": "5.2.0"}


def _extra(line: str) -> str:
    """The extra of pyproject.toml that installs `datasets` `line` with what it works with."""
    import tomllib

    with open("pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    name = "datasets-" + line.replace(".", "-")
    return name if name in extras else "datasets"


#: Every datasets line on the Python the whole suite runs on, and the newest line on every other
#: supported Python: 8 sessions rather than 20, with each line and each Python covered.
MATRIX = [("3.11", line) for line in DATASETS] + [(py, "5.2") for py in PYTHONS if py != "3.11"]


@nox.session
@nox.parametrize("python,datasets", MATRIX)
def compat(session: nox.Session, datasets: str) -> None:
    """The compatibility pipeline on one `datasets` line."""
    session.install(f".[{_extra(datasets)}]", f"datasets=={DATASETS[datasets]}", "pytest>=8", "aiohttp>=3.9")
    session.run(
        "python",
        "-c",
        "import datasets, numpy, pyarrow; print(datasets.__version__, "
        "numpy.__version__, pyarrow.__version__)",
    )
    session.run(
        "pytest",
        "tests/compat",
        "-p",
        "no:cacheprovider",
        "-q",
        env={"CACHETOOL_COMPAT": "1"},
    )
    if (session.python, datasets) == ("3.11", "5.2"):  # README's install-and-demo, once
        session.run(
            "pytest",
            "tests/test_readme.py",
            "-k",
            "demo_command",
            "-p",
            "no:cacheprovider",
            "-q",
            env={"CACHETOOL_FRESH_INSTALL": "1"},
        )
