"""What a new user sees on ordinary paths: real pipelines in a project folder of their own, run
with `cachetool run`, then the commands (and the hints they print) followed as a user follows
them. Each test is a wrong answer once met there: a false statement, a hint that fails, an exit
code the docs contradict."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests import forks

try:  # tests/ may or may not be a package
    from tests.conftest import cachetool_run
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    from conftest import cachetool_run  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

# A helper module of the user's, reached as `helpers.normalize`: dill pickles a module that is
# not installed with everything it holds, so an edit of helpers.py changes the fingerprint.
HELPERS = textwrap.dedent(
    """\
    STOP = {"the", "a"}


    def normalize(s):
        return " ".join(w for w in s.split() if w not in STOP)
    """
)
MODULE_PIPELINE = textwrap.dedent(
    """\
    import os

    from datasets import load_dataset

    import helpers

    here = os.path.dirname(os.path.abspath(__file__))


    def add_len(ex):
        return {"n": len(helpers.normalize(ex["text"]))}


    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    print(ds.map(add_len)._fingerprint)
    """
)


def _project(base: Path, pipeline: str, **files: str) -> tuple[Path, dict[str, str]]:
    project = base / "project"
    project.mkdir()
    rows = "".join(f"{i},the quick fox number {i}\n" for i in range(20))
    (project / "data.csv").write_text("id,text\n" + rows, encoding="utf-8")
    (project / "pipeline.py").write_text(pipeline, encoding="utf-8")
    for name, text in files.items():
        (project / name).write_text(text, encoding="utf-8")
    return project, subprocess_env(base, HF_DATASETS_CACHE=str(base / "cache"), COLUMNS="200")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`cachetool ARGS` as a user runs it, forked from the warm parent (`forks.run`)."""
    return forks.run(
        [sys.executable, "-m", "cachetool", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_an_edited_module_the_function_reads_is_a_change_of_yours_not_a_value_varying_by_itself(
    tmp_path: Path,
) -> None:
    """A map's function calls `helpers.normalize` of the user's module; the user edits a constant
    in helpers.py and runs again: the step is recomputed, and explain names the value of the module
    that changed, with its values — never that the module "pickles differently in every process",
    which a rerun without the edit disproves (it hits)."""
    project, env = _project(tmp_path, MODULE_PIPELINE, **{"helpers.py": HELPERS})
    # The first and third runs fork warm (one hash seed), the second is a fresh interpreter (another).
    first = cachetool_run(project / "pipeline.py", env=env, cwd=project, warm=True).stdout.split()[-1]
    (project / "helpers.py").write_text(HELPERS.replace('"a"}', '"a", "quick"}'), encoding="utf-8")
    second = cachetool_run(project / "pipeline.py", env=env, cwd=project).stdout.split()[-1]
    assert first != second

    proc = _cli(env, "explain", "--last", "--json")
    assert proc.returncode == 0, proc.stderr
    steps = json.loads(proc.stdout)["steps"]
    (step,) = [s for s in steps if s["fingerprint"] == second]
    kinds = [r["kind"] for r in step["reasons"]]
    assert kinds == ["argument"], step["reasons"]
    message = step["reasons"][0]["message"]
    assert message.startswith("`function → global 'helpers' → .STOP` changed {"), message
    assert "pickles differently in every process" not in message

    third = cachetool_run(project / "pipeline.py", env=env, cwd=project, warm=True).stdout.split()[-1]
    assert third == second  # the module hashes the same in another process


# A map that writes one batch, then waits (as a slow map does) until `go` appears.
SLOW_MAP = textwrap.dedent(
    """\
    import os
    import sys
    import time

    from datasets import load_dataset

    here = os.path.dirname(os.path.abspath(__file__))


    def slow(ex, i):
        while i >= 10 and not os.path.exists(os.path.join(here, "go")):
            time.sleep(0.05)
        return {"n": len(ex["text"])}


    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    print("mapping", flush=True)
    ds.map(slow, with_indices=True, writer_batch_size=10)
    """
)


Running = subprocess.Popen[bytes] | forks.ForkedProcess


def _started(project: Path, env: dict[str, str], name: str) -> tuple[Running, Path]:
    """`cachetool run` of the project's pipeline in the background, forked warm (`forks.PIPELINE`:
    these pipelines hash no set nor str), and the file beside the project its stdout goes to."""
    argv = [sys.executable, "-m", "cachetool", "run", str(project / "pipeline.py")]
    out = project.parent / f"{name}.out"
    with open(out, "wb") as sink:
        if forks.available():
            run: Running = forks.ForkedProcess(
                argv, env=env, cwd=project, stdout=sink, stderr=subprocess.DEVNULL, preload=forks.PIPELINE
            )
        else:
            run = subprocess.Popen(argv, env=env, cwd=project, stdout=sink, stderr=subprocess.DEVNULL)
    return run, out


def _said(run: Running, out: Path, *lines: str) -> None:
    """Wait until the run has printed `lines` (and nothing else)."""
    deadline = time.monotonic() + 120
    while out.read_text(encoding="utf-8").split() != list(lines):
        assert run.poll() is None and time.monotonic() < deadline, out.read_text(encoding="utf-8")
        time.sleep(0.02)


def _mapping(project: Path, env: dict[str, str]) -> Running:
    """`cachetool run` of the project's pipeline in the background, once it says "mapping"."""
    run, out = _started(project, env, "mapping")
    try:
        _said(run, out, "mapping")
    except BaseException:
        run.kill()
        run.wait()
        raise
    return run


def _slow_map_writing(project: Path, env: dict[str, str]) -> tuple[Running, Path]:
    """`cachetool run` of SLOW_MAP, and the temporary file its map is writing (once it exists)."""
    run = _mapping(project, env)
    try:
        cache = Path(env["HF_DATASETS_CACHE"])
        for _ in range(600):
            temp = next((p for p in cache.rglob("tmp*") if p.is_file()), None)
            if temp is not None:
                return run, temp
            time.sleep(0.05)
        raise AssertionError("\n".join(sorted(map(str, cache.rglob("*")))))
    except BaseException:
        run.kill()
        run.wait()
        raise


def test_another_users_live_temp_file_lists_as_a_temp_file_of_theirs_not_as_other(tmp_path: Path) -> None:
    """In a shared cache, another user's map is writing its temporary file (0600, as `datasets`
    makes it): this user cannot read it, and `ls` lists it as a temporary file of that user's (a
    writer in progress or killed), not as "other" with nothing said; gc --temp keeps it, and verify,
    which cannot see that user's processes, does not call it a killed writer's leftover with a gc
    command that then refuses."""
    from typer.testing import CliRunner

    from cachetool.cache.scan import scan_cache
    from cachetool.cli.app import app

    try:
        from tests.conftest import as_another_user
    except ImportError:
        from conftest import as_another_user  # type: ignore[no-redef]

    if os.geteuid() != 0:
        pytest.skip("another user's file needs root to make")
    project, env = _project(tmp_path, SLOW_MAP)
    writer, temp = _slow_map_writing(project, env)
    cache = tmp_path / "cache"
    try:
        assert temp.stat().st_mode & 0o777 == 0o600
        for p in (tmp_path, *(d for d in cache.rglob("*") if d.is_dir()), cache):
            os.chmod(p, 0o755)
        for p in tmp_path.parents:  # pytest's folders above it are root's, 0700
            os.chmod(p, os.stat(p).st_mode | 0o005)
        as_root = [e for e in scan_cache(cache).entries if e.path == temp]
        assert [e.kind.value for e in as_root] == ["temp"]
        CliRunner().invoke(app, ["gc", "--temp", "--dry-run", "--cache-dir", str(cache), "--json"])

        def look() -> list[Any]:
            (entry,) = [e for e in scan_cache(cache).entries if e.path == temp]
            planned = CliRunner().invoke(
                app, ["gc", "--temp", "--dry-run", "--cache-dir", str(cache), "--json"]
            )
            checked = CliRunner().invoke(app, ["verify", "--cache-dir", str(cache), "--json"])
            found = [f for f in json.loads(checked.stdout)["findings"] if f["path"] == str(temp)]
            return [
                entry.kind.value,
                [str(p) for p in entry.problems],
                planned.exit_code,
                planned.stdout,
                found,
            ]

        kind, problems, code, planned, found = as_another_user(look)
        assert kind == "temp", (kind, problems)
        assert problems == [
            "another user's temporary file (uid 0) this user may not read: a writer in progress or killed"
        ]
        # verify cannot see that user's processes: it says so, and gives no gc command that refuses
        assert [(f["problem"], "--min-age" in f["hint"]) for f in found] == [
            ("temporary file of another user's (uid 0): a writer in progress or killed", False)
        ], found
        assert code == 0 and str(temp) not in [i["path"] for i in json.loads(planned).get("items", [])], (
            planned
        )
    finally:
        (project / "go").write_text("")
        writer.wait(timeout=120)


# load_dataset of a source whose preparation waits (as a big one takes time) until `go` appears.
GATED_SOURCE = textwrap.dedent(
    """\
    import os
    import sys
    import time

    from datasets import Dataset

    here = os.path.dirname(os.path.abspath(__file__))


    def rows():
        print("generating", flush=True)
        while not os.path.exists(os.path.join(here, "go")):
            time.sleep(0.05)
        for i in range(10):
            yield {"i": i}


    print("loading", flush=True)
    ds = Dataset.from_generator(rows)
    print(ds._fingerprint, flush=True)
    """
)


def test_a_run_that_waited_for_another_runs_preparation_loaded_it_from_the_cache(tmp_path: Path) -> None:
    """Two runs at once on one cache: the first prepares the source, the second waits on datasets'
    lock and then loads what the first made (it generates nothing). The ledger says so: one miss
    and one hit, and explain of the second run says it loaded the step from the cache, not that
    it computed it because "its cache file was gone"."""
    project, env = _project(tmp_path, GATED_SOURCE)
    first, out = _started(project, env, "first")
    second: Running | None = None
    try:
        _said(first, out, "loading", "generating")
        second, out2 = _started(project, env, "second")
        _said(second, out2, "loading")
        time.sleep(1.5)  # into datasets' lock, which the first run holds
        (project / "go").write_text("")
        assert first.wait(timeout=120) == 0 and second.wait(timeout=120) == 0
    finally:
        (project / "go").write_text("")
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    out_first, out_second = out.read_text(encoding="utf-8"), out2.read_text(encoding="utf-8")
    assert "generating" not in out_second  # the second run generated nothing
    assert out_first.split()[-1] == out_second.split()[-1]

    stats = json.loads(_cli(env, "stats", "--json").stdout)
    assert (stats["hits"], stats["misses"]) == (1, 1), stats
    explained = _cli(env, "explain", "--last", "--json")
    doc = json.loads(explained.stdout)
    assert (doc["computed"], doc["loaded"]) == (0, 1), doc
    assert "cache file was gone" not in explained.stdout


# A module of the user's that takes the time when it is imported; the map calls a helper of it.
TIMED_HELPERS = textwrap.dedent(
    """\
    import time

    STARTED = time.time()


    def norm(s):
        return s.lower()
    """
)
TIMED_PIPELINE = textwrap.dedent(
    """\
    import os

    from datasets import load_dataset

    import timed_helpers

    here = os.path.dirname(os.path.abspath(__file__))
    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    print(ds.map(lambda e: {"t": timed_helpers.norm(e["text"])})._fingerprint)
    """
)


def test_check_determinism_names_the_value_in_the_users_module_not_the_module(tmp_path: Path) -> None:
    """`datasets` hashes a module of the user's with all it holds: when a value in it is made at
    run time, check-determinism names that value (`… → global 'timed_helpers' → .STARTED`, a
    timestamp), not the module it sits in."""
    project, env = _project(tmp_path, TIMED_PIPELINE, **{"timed_helpers.py": TIMED_HELPERS})
    proc = forks.run(
        [sys.executable, "-m", "cachetool", "check-determinism", "pipeline.py", "--json"],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    (difference,) = json.loads(proc.stdout)["differences"]
    culprits = [(c["path"], c["kind"]) for c in difference["culprits"]]
    assert culprits == [(["global 'timed_helpers'", ".STARTED"], "timestamp")], difference


KWARGS_PIPELINE = textwrap.dedent(
    """\
    import os

    from datasets import load_dataset

    here = os.path.dirname(os.path.abspath(__file__))
    WORDS = ("fox", "dog")


    def drop(ex, words):
        return {"text": " ".join(w for w in ex["text"].split() if w not in words)}


    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    print(ds.map(drop, fn_kwargs={"words": WORDS})._fingerprint)
    """
)


def test_explain_of_a_value_grown_past_what_the_ledger_keeps_says_what_it_was_and_that_it_changed(
    tmp_path: Path,
) -> None:
    """The user lengthens a tuple passed in fn_kwargs past the text the ledger keeps of a value:
    explain says it changed from its old value to another one whose text is not kept, never
    "changed ('fox', 'dog') → " with nothing after the arrow."""
    project, env = _project(tmp_path, KWARGS_PIPELINE)
    cachetool_run(project / "pipeline.py", env=env, cwd=project, warm=True)
    longer = '("fox", "dog", "number", "quick", "the", "lazy", "brown", "jumps")'
    script = project / "pipeline.py"
    script.write_text(script.read_text(encoding="utf-8").replace('("fox", "dog")', longer), encoding="utf-8")
    cachetool_run(script, env=env, cwd=project, warm=True)

    proc = _cli(env, "explain", "--last", "--json")
    steps = json.loads(proc.stdout)["steps"]
    (reason,) = [r for s in steps for r in s["reasons"]]
    assert reason["path"] == "fn_kwargs['words']", reason
    assert reason["before"] == "('fox', 'dog')" and reason["after"], reason
    assert not reason["message"].rstrip().endswith("→"), reason["message"]


def test_after_following_the_hint_of_a_killed_run_explain_does_not_say_it_wrote_nothing(
    tmp_path: Path,
) -> None:
    """A run killed (SIGKILL) in a map: explain --last names its unfinished file and the gc command
    that removes it; after the user runs that command, explain no longer names the file, and does
    not say the run "had written nothing yet" (it had: gc removed it)."""
    import signal

    project, env = _project(tmp_path, SLOW_MAP)
    run, _ = _slow_map_writing(project, env)
    run.send_signal(signal.SIGKILL)
    run.wait()
    cache = tmp_path / "cache"
    before = _cli(env, "explain", "--last").stdout
    command = f"cachetool gc --temp --min-age 0 --cache-dir {cache}"
    assert "It had written (unfinished" in before and command in before, before
    removed = _cli(env, *command.split()[1:], "--yes")
    assert removed.returncode == 0, removed.stderr
    after = _cli(env, "explain", "--last").stdout
    assert "killed" in after and "It had written (unfinished" not in after, after
    assert "It had written nothing yet" not in after, after
    assert "Nothing it wrote is left in the cache." in after, after


# A num_proc=2 map whose workers write a batch each, then wait until `go` appears.
GATED_WORKERS = textwrap.dedent(
    """\
    import os
    import time

    from datasets import load_dataset

    here = os.path.dirname(os.path.abspath(__file__))


    def slow(ex, i):
        while i % 10 >= 2 and not os.path.exists(os.path.join(here, "go")):
            time.sleep(0.05)
        return {"n": len(ex["text"])}


    ds = load_dataset("csv", data_files=os.path.join(here, "data.csv"), split="train")
    print("mapping", flush=True)
    ds.map(slow, with_indices=True, writer_batch_size=1, num_proc=2)
    """
)


def _children(pid: int) -> set[int]:
    """The child processes of `pid`, and theirs."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            kids = {int(k) for k in f.read().split()}
    except OSError:
        return set()
    return kids.union(*(_children(k) for k in kids))


def test_a_killed_run_whose_num_proc_workers_still_write_is_not_told_to_rerun_or_remove_their_files(
    tmp_path: Path,
) -> None:
    """SIGKILL of a run in a num_proc map leaves its pool workers alive, still writing their
    temporary files (they then finish the shards). explain --last says they are still writing
    (their pids), and gives neither the gc command (gc keeps files in use) nor "run the pipeline
    again" over files being written."""
    import signal

    project, env = _project(tmp_path, GATED_WORKERS)
    run = _mapping(project, env)
    workers: set[int] = set()
    try:
        cache = tmp_path / "cache"
        for _ in range(600):
            if len([p for p in cache.rglob("tmp*") if p.is_file()]) == 2:
                break
            time.sleep(0.05)
        workers = _children(run.pid)
        run.send_signal(signal.SIGKILL)
        run.wait()
        said = _cli(env, "explain", "--last").stdout
        assert "was killed" in said, said
        alive = sorted(w for w in workers if Path(f"/proc/{w}").exists())
        assert alive and "still writing" in said and str(alive[0]) in said, said
        assert "cachetool gc" not in said and "run the pipeline again" not in said, said
    finally:
        (project / "go").write_text("")
        if run.poll() is None:
            run.kill()
            run.wait()
        time.sleep(3)  # the workers finish their shards
        for pid in workers:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_ls_of_a_cache_the_last_run_recorded_in_points_nowhere_else(tmp_path: Path) -> None:
    """A pipeline loads with `cache_dir='other'`; the next traced run maps an in-memory dataset and
    records in the default cache, which holds no file. `ls` said "the last traced run recorded
    steps in …/other" (the root written to last other than this one), of a run that was not the
    last; it names that root only when its ledger was written to after this one's."""
    in_memory = "from datasets import Dataset\nDataset.from_dict({'x': [1]}).map(lambda r: {'y': 1})\n"
    elsewhere = (
        "from datasets import load_dataset\nload_dataset('csv', data_files='data.csv', cache_dir='other')\n"
    )
    project, env = _project(tmp_path, in_memory, **{"elsewhere.py": elsewhere})
    cachetool_run(project / "elsewhere.py", env=env, cwd=project, warm=True)
    said = _cli(env, "ls")
    assert "recorded steps in" in said.stderr and str(project / "other") in said.stderr, said.stderr
    cachetool_run(project / "pipeline.py", env=env, cwd=project, warm=True)
    said = _cli(env, "ls")
    assert said.returncode == 0 and "No entries" in said.stdout, said.stdout
    assert "recorded steps in" not in said.stderr, said.stderr
