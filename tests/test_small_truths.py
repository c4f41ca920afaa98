"""Small wrong answers a first use of cachetool met: each one, as a user saw it, with real
`datasets` in real processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

try:  # tests/ may or may not be a package
    from tests import forks
    from tests.conftest import cachetool_run, invoke
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    import forks  # type: ignore[no-redef]
    from conftest import cachetool_run, invoke  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

# A map that says when it is well under way (argv[2] names the marker; "-": no marker, full speed).
SLOW_MAP = textwrap.dedent(
    """\
    import sys, time
    from pathlib import Path
    from datasets import load_dataset

    def slow(ex, idx):
        marker = sys.argv[2]
        if marker != "-" and idx == 300:
            Path(marker).write_text("busy")
        time.sleep(0.002 if marker != "-" and idx >= 300 else 0)
        return {"y": ex["x"] * 2}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    ds = ds.map(slow, with_indices=True, writer_batch_size=50)
    print("finished")
    """
)


def _csv(path: Path, rows: int) -> None:
    path.write_text("x\n" + "".join(f"{i}\n" for i in range(rows)), encoding="utf-8")


def _run_and_kill(tmp_path: Path, env: dict[str, str]) -> None:
    """`cachetool run p.py d.csv busy` (forked warm: tests/forks.py), SIGKILLed once the map says
    it is under way."""
    marker = tmp_path / "busy"
    cmd = [*forks.CLI, "run", "p.py", "d.csv", str(marker)]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proc: forks.ForkedProcess | subprocess.Popen[bytes]
    if forks.available():
        proc = forks.ForkedProcess(cmd, env=env, cwd=tmp_path, preload=forks.PIPELINE, **quiet)
    else:
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, **quiet)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_explain_after_a_killed_attempt_on_other_input_is_not_a_first_time(tmp_path: Path) -> None:
    """A traced run is SIGKILLed in its map; the input file changes; the rerun computes the map.
    `explain --last` said "first time this step ran", though the ledger holds the killed attempt of
    that call site: it says an earlier attempt was killed, and that the input differs."""
    (tmp_path / "p.py").write_text(SLOW_MAP, encoding="utf-8")
    _csv(tmp_path / "d.csv", 1200)
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    _run_and_kill(tmp_path, env)
    killed = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["run"]
    _csv(tmp_path / "d.csv", 900)
    cachetool_run("p.py", "d.csv", "-", env=env, cwd=tmp_path, warm=True)
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    (step,) = [s for s in doc["steps"] if s["operation"] == "map"]
    kinds = [r["kind"] for r in step["reasons"]]
    assert "first-run" not in kinds, step["reasons"]
    (reason,) = step["reasons"]
    assert reason["kind"] == "killed-before", reason
    assert f"in run {killed}" in reason["message"] and "input" in reason["message"], reason
    told = " ".join(invoke("explain", "--last", env=env, columns=200).stdout.split())
    assert "first time" not in told and "was killed" in told, told


def test_an_untraced_map_s_hint_names_tracing_in_python_too(tmp_path: Path) -> None:
    """A map run as plain `python p.py` left no record: `lineage` and `explain` said to run the
    pipeline with `cachetool run` only; a notebook (or code that is not a script) records with
    `cachetool.tracing()`, and both say so."""
    (tmp_path / "d.csv").write_text("x\n1\n2\n3\n", encoding="utf-8")
    (tmp_path / "p.py").write_text(
        "from datasets import load_dataset\n"
        "ds = load_dataset('csv', data_files='d.csv', split='train').map(lambda ex: {'y': ex['x'] * 2})\n"
        "print(ds.cache_files[0]['filename'])\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "p.py"], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    )
    path = done.stdout.strip().splitlines()[-1]
    for command in ("lineage", "explain"):
        said = invoke(command, path, env=env, columns=250)
        told = " ".join((said.stdout + said.stderr).split())
        assert "`cachetool run" in told and "`cachetool.tracing()`" in told, (command, told)


def test_check_determinism_help_of_isolated_agrees_with_jobs() -> None:
    """`check-determinism --help` said of --isolated "Either way the runs go one after the other",
    while --jobs runs isolated runs at once: the help of --isolated says what --jobs does to it."""
    said = invoke("check-determinism", "--help", columns=250)
    told = " ".join(said.stdout.split())
    assert said.exit_code == 0, said.stderr
    assert "Either way the runs go one after the other" not in told, told
    isolated = told[told.index("--isolated Give") : told.index("--cold / --no-cold")]
    assert "one after the other" in isolated and "at a time" in isolated, isolated


def test_api_reference_names_the_keywords_gc_cache_takes() -> None:
    """docs/api.md's `GcOptions` table named the field `datasets`, while `gc_cache()` takes the
    keyword `dataset` (`datasets=` is a TypeError): the table names the keyword the function takes."""
    import inspect
    import re

    import cachetool

    text = (Path(__file__).parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    section = text[text.index("### `GcOptions`") :]
    table = section[section.index("\n|") : section.index("\n\n", section.index("\n|"))]
    names = (
        re.match(r"\| `([^`]+)`(?: \(keyword `([^`]+)`\))?", row) for row in table.strip().splitlines()[2:]
    )
    shown = [m.group(2) or m.group(1) for m in names if m is not None]
    takes = set(inspect.signature(cachetool.gc_cache).parameters)
    assert "dataset" in shown and not set(shown) - takes, (shown, takes)


@pytest.mark.slow
def test_a_tmp_file_renamed_while_ls_reads_its_folder_is_not_called_other(tmp_path: Path) -> None:
    """`datasets` renames a map's `tmp*` file to its `cache-<fp>.arrow` name when the map ends; one
    renamed after the scan listed its folder, before it read the file, was listed as `other`.
    Here a killed map's real `tmp*` file is renamed between the listing and the reading: the
    scan leaves the name that is gone out (the next listing shows the file under its new name)."""
    from cachetool.cache.layout import Kind
    from cachetool.cache.scan import Scanner
    from cachetool.cache.walk import list_dir

    (tmp_path / "p.py").write_text(SLOW_MAP, encoding="utf-8")
    _csv(tmp_path / "d.csv", 1200)
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    _run_and_kill(tmp_path, env)
    (tmp,) = (tmp_path / "cache").rglob("tmp*")
    folder = tmp.parent
    scanner = Scanner(folder, False, None)
    items, error = list_dir(folder)
    assert error is None and tmp.name in [it.name for it in items]
    ds = scanner.builder_dir(folder, items)
    tmp.rename(folder / "cache-0123456789abcdef.arrow")
    scanner.files_in(folder, items, ds)
    kinds = {e.path.name: e.kind for e in scanner.entries}
    assert kinds.get(tmp.name) != Kind.OTHER, kinds
    assert Kind.OTHER not in kinds.values(), kinds


def test_a_load_dataset_that_prepares_is_recorded_with_the_time_it_took(tmp_path: Path) -> None:
    """A traced `load_dataset` whose CSV takes half a second to convert is recorded as computed in
    at least that long, in the ledger `explain` and `stats` read. It recorded only the time of
    `as_dataset`, after the preparation: "load_dataset … (computed, 4 ms)"."""
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(10)), encoding="utf-8")
    (tmp_path / "p.py").write_text(
        "import time\nfrom datasets import load_dataset\n\n\ndef slow(value):\n"
        "    time.sleep(0.05)\n    return int(value)\n\n\n"
        "load_dataset('csv', data_files='d.csv', split='train', converters={'x': slow})\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    began = time.time()
    cachetool_run("p.py", env=env, cwd=tmp_path, warm=True)
    (step,) = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["steps"]
    assert step["operation"] == "load_dataset" and step["status"] == "computed", step
    assert step["duration"] >= 0.5 and step["time"] >= began, step
