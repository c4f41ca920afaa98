"""Several pipelines of tests/corpus checked as one: a script that runs each of them in turn, as
`python cNN.py` would, in one interpreter (one `import datasets` per run instead of one per script).

Each script's code is compiled with its own file name and executed in the interpreter's real
`__main__` module, its globals emptied first: the script's functions and classes belong to
`__main__`, which is `sys.modules["__main__"]` and the module dill took for `__main__` when it was
imported, so dill pickles them by value as in a plain run (`runpy.run_path` would give each script
a module of its own, and a class or function of a module that is not dill's `__main__` pickles by
reference). The corpus folder comes first on `sys.path`, so helper modules next to the scripts
import. `check_once` checks a pipeline once per session (`once`: anything made once per session);
its report is read per script: `causes_of`, `events_of` and `lines_of` keep what the steps a
script called recorded and what the report says about them (by the file of their call site).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from cachetool.determinism.verdict import Cause, DeterminismReport, Event, cause_lines, human_lines
from tests.conftest import once_per_session

CORPUS = Path(__file__).parent / "corpus"
T = TypeVar("T")

_DRIVER = """\
def _run_each(paths, corpus):
    import importlib.machinery
    import sys

    sys.path.insert(0, corpus)
    globals_ = sys.modules["__main__"].__dict__
    given = {{k: v for k, v in globals_.items() if k.startswith("__") and k != "__annotations__"}}
    for path in paths:
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        globals_.clear()
        globals_.update(given, __file__=path, __doc__=None, __annotations__={{}})
        globals_["__loader__"] = importlib.machinery.SourceFileLoader("__main__", path)
        exec(code, globals_)


_run_each({paths!r}, {corpus!r})
"""


def write_pipeline(script: Path, scripts: Sequence[str], folder: Path = CORPUS) -> Path:
    """Write `script`, a pipeline that runs the corpus `scripts` (file names in `folder`) in turn."""
    paths = [str(folder / s) for s in scripts]
    script.write_text(_DRIVER.format(paths=paths, corpus=str(CORPUS)), encoding="utf-8")
    return script


def once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], T]) -> tuple[Path, T]:
    """`make(folder)` once per session however many xdist workers ask for it (the first makes it,
    the others wait and read what it returned, pickled): the folder (`<session>/name`) and that."""
    folder, made = once_per_session(tmp_path_factory, name, lambda folder: pickle.dumps(make(folder)))
    return folder, pickle.loads(made)


def check_once(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    scripts: Sequence[str],
    check: Callable[[Path, Path], DeterminismReport],
) -> tuple[Path, DeterminismReport]:
    """`check(pipeline, folder)` of the pipeline of `scripts`, once per session (`once`): the
    folder it was checked in (`<session>/name`, which also holds the pipeline) and the report."""
    return once(
        tmp_path_factory, name, lambda folder: check(write_pipeline(folder / f"{name}.py", scripts), folder)
    )


def causes_of(
    script: str, report: DeterminismReport, checked: Sequence[str], random: bool = False
) -> list[Cause]:
    """The deterministic (or `random`) causes found in the steps `script` called, in order, in a
    report on the corpus scripts `checked` (a pipeline of them, or `script` alone). Every cause
    of the report is one a step of these scripts made."""
    assert report.analysis is not None, "\n".join(human_lines(report))
    causes = report.analysis.random_causes if random else report.analysis.deterministic_causes
    assert {c.step.file for c in causes} <= {str(CORPUS / name) for name in checked}, "\n".join(
        human_lines(report)
    )
    return [c for c in causes if c.step.file == str(CORPUS / script)]


def events_of(script: str, report: DeterminismReport, run: int = 0) -> list[Event]:
    """The events of run `run` recorded in steps `script` called."""
    path = str(CORPUS / script)
    return [e for e in report.runs[run].events if e.call_site is not None and e.call_site.file == path]


def lines_of(script: str, report: DeterminismReport, checked: Sequence[str]) -> list[str]:
    """What the report says about `script`: the whole report on that script alone; in a report on
    a pipeline, the lines of each cause found in the steps `script` called (causes, random
    fallbacks, differences inside a cascade), as the report shows them."""
    if list(checked) == [script]:
        return human_lines(report)
    analysis = report.analysis
    assert analysis is not None, "\n".join(human_lines(report))
    path = str(CORPUS / script)
    lines: list[str] = []
    for cause in (*analysis.deterministic_causes, *analysis.random_causes, *analysis.masked):
        if cause.step.file == path:
            lines.extend(cause_lines(cause))
    return lines


def shared_scripts(mode: str) -> list[str]:
    """The corpus scripts the test files check in `mode` ("isolated" or "default"), all of them:
    each file names its own (imported here when first asked, after the files are)."""
    from tests import test_cmd_check_determinism as command
    from tests import test_determinism_corpus_modes as modes
    from tests import test_determinism_diagnosis as diagnosis

    scripts = [*modes.SCRIPTS, *diagnosis.PIPELINES[mode]]
    if mode == "isolated":
        scripts += command.TOGETHER
    assert len(set(scripts)) == len(scripts), scripts
    return sorted(scripts)


def shared_reports(
    tmp_path_factory: pytest.TempPathFactory, mode: str
) -> tuple[Path, list[str], list[DeterminismReport]]:
    """The corpus scripts of every test file that checks some in `mode`, checked as one pipeline
    (one `import datasets` per run for all of them), once per session: the folder it was checked
    in (`<session>/corpus-<mode>`), those scripts and the reports. "isolated": one check with
    `--isolated`. "default": the default mode on an empty cache, then the same again on the cache
    the first check left (a warm repeat)."""
    from cachetool.determinism.check import check_determinism
    from tests.conftest import hf_env

    scripts = shared_scripts(mode)

    def check(script: Path, folder: Path) -> list[DeterminismReport]:
        env = hf_env(folder)
        if mode == "isolated":
            return [check_determinism(script, env=env, cwd=CORPUS, isolated=True, rerun=False, timeout=120)]
        return [check_determinism(script, env=env, cwd=CORPUS, rerun=False, timeout=120) for _ in range(2)]

    name = f"corpus-{mode}"
    folder, reports = once(
        tmp_path_factory, name, lambda folder: check(write_pipeline(folder / f"{name}.py", scripts), folder)
    )
    return folder, scripts, reports


def controls_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], DeterminismReport]:
    """The look-alike controls the test files check with `--isolated` (each file names its own),
    checked as one pipeline over 3 runs, once per session: those scripts and the report."""
    from cachetool.determinism.check import check_determinism
    from tests import test_cmd_check_determinism as command
    from tests import test_determinism_false_alarms as alarms
    from tests.conftest import hf_env

    scripts = sorted({*command.CONTROLS, *alarms.CONTROLS})

    def check(script: Path, folder: Path) -> DeterminismReport:
        env = hf_env(folder)
        return check_determinism(script, env=env, cwd=CORPUS, isolated=True, rerun=False, timeout=120, runs=3)

    return scripts, check_once(tmp_path_factory, "corpus-controls", scripts, check)[1]
