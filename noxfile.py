"""The `datasets` versions cachetool is tested on: one session per release line.

    nox -s compat              # every line
    nox -s "compat(datasets='2.21')"

Each session installs cachetool and one `datasets` release (with the numpy, pyarrow, fsspec and
huggingface_hub that release works with) into its own environment and runs tests/compat: a real
pipeline under `cachetool run`, then `ls`, `lineage`, `verify --deep`, `gc --temp`, `explain` and
`check-determinism`. The full suite runs on the newest line (`pip install -e ".[test]"`).
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True

#: datasets line -> what to install with it. Older lines predate numpy 2, pyarrow's removal of
#: `PyExtensionType` and huggingface_hub 1.0; each pins the fsspec range it was released against.
DATASETS = {
    "2.14": ["datasets==2.14.7", "numpy<2", "pandas<2.3", "pyarrow>=15,<17", "huggingface_hub<0.26"],
    "2.21": ["datasets==2.21.0", "numpy<2.1", "pyarrow>=15,<18", "huggingface_hub<0.26"],
    "3.6": ["datasets==3.6.0", "pyarrow>=15,<21", "huggingface_hub<1"],
    "4.8": ["datasets==4.8.5"],
    "5.2": ["datasets==5.2.0"],
}


@nox.session
@nox.parametrize("datasets", list(DATASETS))
def compat(session: nox.Session, datasets: str) -> None:
    """The compatibility pipeline on one `datasets` line."""
    session.install(".", *DATASETS[datasets], "pytest>=8", "aiohttp>=3.9")
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
