"""A pipeline killed in the middle of a long `map`: `explain --last` says the run was killed, names
the step that was running and what it had written. (It said "Nothing was recomputed" or "first
time this step ran": the killed step left no record at all.)"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

try:  # tests/ may or may not be a package
    from tests import forks
    from tests.conftest import cachetool_run, invoke
    from tests.lineage_pipeline import subprocess_env
except ImportError:
    import forks  # type: ignore[no-redef]
    from conftest import cachetool_run, invoke  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_orphans(tmp_path: Path) -> Iterator[None]:
    """A SIGKILLed `num_proc` map leaves its pool workers running (as it does for a user); once the
    test has looked at them, they go, so they do not load the machine for the rest of the run."""
    yield
    mine = os.fsencode(tmp_path)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:  # a cold run names tmp_path in its command line; a warm fork only in its directory
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                named = mine in f.read()
            if named or os.fsencode(os.readlink(f"/proc/{pid}/cwd")).startswith(mine):
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue


# Line 12 is the long map; its function says when it is well under way (a few written batches).
PIPELINE = textwrap.dedent(
    """\
    import sys, time
    from pathlib import Path
    from datasets import load_dataset

    def slow(ex, idx):
        if idx == 300:
            Path(sys.argv[2]).write_text("busy")
        time.sleep(0.002 if idx >= 300 else 0)
        return {"y": ex["x"] * 2}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    ds = ds.map(slow, with_indices=True, writer_batch_size=50)
    print("finished")
    """
)


# The script is killed in `load_dataset`'s own build, before any transform: its converter says
# when the build is well under way (a few chunks written).
LOADING = textwrap.dedent(
    """\
    import sys, time
    from pathlib import Path
    from datasets import load_dataset

    def slow(value):
        if value == "300":
            Path(sys.argv[2]).write_text("busy")
        time.sleep(0.002 if int(value) >= 300 else 0)
        return int(value)

    ds = load_dataset("csv", data_files=sys.argv[1], split="train", converters={"x": slow}, chunksize=100)
    print("finished")
    """
)


# The long map runs on a DatasetDict split loaded back from the folder it was saved to, so its
# unfinished file is in that folder, a cache root of its own.
SAVED = textwrap.dedent(
    """\
    import sys, time
    from pathlib import Path
    from datasets import DatasetDict, load_dataset, load_from_disk

    def slow(ex, idx):
        if idx == 300:
            Path(sys.argv[2]).write_text("busy")
        time.sleep(0.002 if idx >= 300 else 0)
        return {"y": ex["x"] * 2}

    DatasetDict(train=load_dataset("csv", data_files=sys.argv[1], split="train")).save_to_disk("my saved")
    load_from_disk("my saved")["train"].map(slow, with_indices=True, writer_batch_size=50)
    print("finished")
    """
)


def _tmp_sizes(tmp_path: Path, folder: str = "cache") -> dict[Path, int]:
    return {p: p.stat().st_size for p in (tmp_path / folder).rglob("tmp*") if p.is_file()}


def _run_and_kill(tmp_path: Path, env: dict[str, str], script: str = "p.py", writes_in: str = "cache") -> int:
    """`cachetool run SCRIPT d.csv` (the process becomes the script's), SIGKILLed once the script
    says it is busy and, for a map (p.py, saved.py), once its unfinished file in `writes_in`
    holds bytes. Forked warm (`forks.PIPELINE`): the killed runs and the reruns of these
    pipelines hash no set nor str, so sharing a hash seed changes nothing they show."""
    proc = _start_and_kill(tmp_path, env, script, writes_in, warm=True)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert b"finished" not in (tmp_path / "out.txt").read_bytes()
    return proc.pid


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _warm(
    argv: list[str], tmp_path: Path, env: dict[str, str], sink: Any, *, group: bool = False
) -> subprocess.Popen[bytes] | forks.ForkedProcess:
    """`argv` (a `cachetool run` of a pipeline that hashes no set nor str) started in `tmp_path`,
    its stdout and stderr to `sink`, in a session of its own with `group`: forked warm
    (`forks.PIPELINE`) where forks are available."""
    if forks.available():
        return forks.ForkedProcess(
            argv,
            env=env,
            cwd=tmp_path,
            stdout=sink,
            stderr=sink,
            preload=forks.PIPELINE,
            start_new_session=group,
        )
    return subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=sink, stderr=sink, start_new_session=group)


def _start_and_kill(
    tmp_path: Path,
    env: dict[str, str],
    script: str = "p.py",
    writes_in: str = "cache",
    *,
    ctrl_c: bool = False,
    warm: bool = False,
) -> subprocess.Popen[bytes] | forks.ForkedProcess:
    """`_run_and_kill` without reaping: the killed process stays a zombie until the caller waits
    (unless `warm`: forked from the warm parent of `forks.PIPELINE`, which reaps it at once).
    Its output goes to `out.txt`, not a pipe: pool workers orphaned by the kill keep a pipe open.
    With `ctrl_c`, SIGINT goes to the run's process group instead, as a terminal's Ctrl-C does."""
    marker = tmp_path / "busy"
    marker.unlink(missing_ok=True)
    before = set(_tmp_sizes(tmp_path, writes_in))
    output = tmp_path / "out.txt"
    argv = [sys.executable, "-m", "cachetool", "run", script, "d.csv", str(marker)]
    proc: subprocess.Popen[bytes] | forks.ForkedProcess
    with open(output, "wb") as sink:
        if warm and not ctrl_c and forks.available():
            proc = forks.ForkedProcess(
                argv, env=env, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT, preload=forks.PIPELINE
            )
        else:
            # A terminal's Ctrl-C reaches a process that has not ignored SIGINT, even when the
            # tests run as a background job (which inherits SIGINT ignored).
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=tmp_path,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=ctrl_c,
                preexec_fn=_default_sigint if ctrl_c else None,
            )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, output.read_text()
            assert time.monotonic() < deadline, "the script never got under way"
            time.sleep(0.05)
        while script != "load.py" and not any(
            n for p, n in _tmp_sizes(tmp_path, writes_in).items() if p not in before
        ):
            assert proc.poll() is None, output.read_text()
            assert time.monotonic() < deadline, "the map never wrote to its unfinished file"
            time.sleep(0.01)
        if ctrl_c:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGKILL)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def _explained(tmp_path: Path, env: dict[str, str], pid: int, before: set[Path]) -> set[Path]:
    """What `explain --last` says of the run just killed; returns the unfinished files it names."""
    said = invoke("explain", "--last", env=env)
    human = said.stdout
    assert said.exit_code == 0, said.stderr
    assert "Nothing was recomputed" not in human, human
    assert "first time this step ran" not in human, human
    assert "killed" in human and f"process {pid}" in human, human
    assert "map" in human and "p.py:12" in human, human
    new = {p for p in (tmp_path / "cache").rglob("tmp*") if p.is_file()} - before
    assert new, "datasets left no unfinished file"
    assert all(p.name in human for p in new), human
    assert not any(p.name in human for p in before), human
    assert "Nothing it wrote is left in the cache." not in human, human
    command = f"cachetool gc --temp --min-age 0 --cache-dir {tmp_path / 'cache'}"
    assert command in human, human

    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    interrupted = doc["interrupted"]
    assert interrupted["state"] == "killed" and interrupted["pid"] == pid
    assert interrupted["step"]["operation"] == "map"
    assert interrupted["step"]["call_site"]["line"] == 12
    written = {Path(w["path"]): w["size"] for w in interrupted["written"]}
    assert set(written) == new and all(size > 0 for size in written.values()), written
    return new


def test_explain_last_says_the_run_was_killed_in_the_map_and_what_it_wrote(tmp_path: Path) -> None:
    """SIGKILL the script while its map is writing, twice: `explain --last` says the run was
    killed (the process named), names the map at p.py:12 that was running, and lists the
    unfinished file that run had written, with its size. It said "first time this step ran" (of
    the CSV load) after the first kill and "Nothing was recomputed" after the second (the load
    was then a cache hit). The JSON document carries the same facts. It gives the gc command
    that removes what the runs left unfinished (`gc --temp --min-age 0 --cache-dir ROOT`); run
    as printed (with --yes), it removes them."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    first = _explained(tmp_path, env, _run_and_kill(tmp_path, env), set())
    second = _explained(tmp_path, env, _run_and_kill(tmp_path, env), first)
    line = next(x for x in invoke("explain", "--last", env=env).stdout.splitlines() if "gc --temp" in x)
    argv = line.split()
    assert argv[:2] == ["cachetool", "gc"], line
    removed = invoke(*argv[1:], "--yes", env=env)
    assert removed.exit_code == 0, removed.stdout + removed.stderr
    assert not any(p.exists() for p in first | second)


def test_a_killed_num_proc_map_is_told_by_explain_and_lineage(tmp_path: Path) -> None:
    """A `num_proc=2` map whose process is SIGKILLed: its orphaned pool workers finish their
    shards after the kill. explain --last lists those finished shards (it said "It had written
    nothing yet"), and `lineage` of the map's fingerprint names the step and the killed run (it
    said "run the pipeline with `cachetool run`", of a run that was traced), and so does
    `explain` of it."""
    (tmp_path / "p.py").write_text(
        PIPELINE.replace("writer_batch_size=50)", "writer_batch_size=50, num_proc=2)"), encoding="utf-8"
    )
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    pid = _run_and_kill(tmp_path, env)
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    fp = Path(doc["interrupted"]["step"]["paths"][0]).name.removeprefix("cache-").removesuffix(".arrow")
    deadline = time.monotonic() + 120
    while len(list((tmp_path / "cache").rglob(f"cache-{fp}_*_of_00002.arrow"))) < 2:
        assert time.monotonic() < deadline, "the orphaned workers never finished"
        time.sleep(0.1)
    while any((tmp_path / "cache").rglob("tmp*")):  # the last rename
        assert time.monotonic() < deadline
        time.sleep(0.1)
    human = invoke("explain", "--last", env=env, columns=200).stdout
    assert f"killed (process {pid} " in human, human
    assert "Nothing it wrote is left in the cache." not in human, human
    assert human.count(f"cache-{fp}_0000") == 2, human
    written = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["interrupted"]["written"]
    assert len(written) == 2 and all(w["finished"] for w in written), written

    said = invoke("lineage", fp, env=env, columns=200)
    assert said.exit_code == 0, said.stderr
    assert "cachetool run" not in said.stdout + said.stderr, said.stdout + said.stderr
    assert "map @ p.py:12" in said.stdout and "killed" in said.stdout, said.stdout
    explained = invoke("explain", fp, env=env, columns=200)
    assert "cachetool run" not in explained.stderr and "was killed in it" in explained.stderr, (
        explained.stderr
    )


def test_explain_last_is_about_a_run_killed_while_load_dataset_builds(tmp_path: Path) -> None:
    """A complete run, then a run SIGKILLed while `load_dataset` still builds its CSV (no
    transform began): `explain --last` is about the killed run and says it was killed (the
    process named) in load_dataset, with the unfinished folder it left and the command that
    removes it, in human and JSON output. It explained the complete run before: the build
    writes no step record, and the latest run was the one with the latest step; then it said the
    run was killed "between steps"."""
    (tmp_path / "load.py").write_text(LOADING, encoding="utf-8")
    (tmp_path / "small.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(100)), encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    cachetool_run("load.py", "small.csv", str(tmp_path / "unused"), env=env, cwd=tmp_path, warm=True)
    complete = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["run"]

    pid = _run_and_kill(tmp_path, env, "load.py")
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    assert doc["run"] != complete, doc
    assert doc["interrupted"] is not None, doc
    assert doc["interrupted"]["state"] == "killed" and doc["interrupted"]["pid"] == pid, doc
    step = doc["interrupted"]["step"]
    assert doc["steps"] == [] and step["operation"] == "load_dataset", doc
    (building,) = (tmp_path / "cache").rglob("*.incomplete")
    assert step["paths"] == [str(building).removesuffix(".incomplete")], step
    human = " ".join(invoke("explain", "--last", env=env, columns=200).stdout.split())
    assert f"Run {doc['run']} " in human and f"was killed (process {pid} " in human, human
    assert ") in load_dataset @ load.py:11," in human and "between steps" not in human, human
    assert f"It left {building} unfinished" in human, human
    command = human[human.index("cachetool gc --temp") :].split(" ")
    assert command[:5] == ["cachetool", "gc", "--temp", "--min-age", "0"], human
    assert invoke(*command[1:], "-y", env=env).exit_code == 0 and not building.exists()
    for other in (["--last", "--all-roots"], ["--script", str(tmp_path / "load.py")]):  # the whole ledger
        assert json.loads(invoke("explain", "--json", *other, env=env).stdout)["run"] == doc["run"], other


def test_a_run_that_writes_only_under_cache_dir_records_nothing_in_the_default_root(tmp_path: Path) -> None:
    """A pipeline whose `load_dataset` and map write only under `cache_dir=other`: the run is
    recorded there alone, complete and killed alike. The default cache root stays untouched (it
    held a 0-step run and the run's lease, and `explain --last` in `other` pointed there)."""
    script = LOADING.replace('split="train",', 'split="train", cache_dir="other",').replace(
        'print("finished")', 'ds.map(lambda e: {"y": e["x"]})\nprint("finished")'
    )
    (tmp_path / "load.py").write_text(script, encoding="utf-8")
    (tmp_path / "small.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(100)), encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    default = tmp_path / "cache"
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(default))
    cachetool_run("load.py", "small.csv", str(tmp_path / "unused"), env=env, cwd=tmp_path, warm=True)
    assert not default.exists(), sorted(default.rglob("*"))
    other = ("--cache-dir", str(tmp_path / "other"))
    there = invoke("explain", "--last", "--json", *other, env=env)
    steps = json.loads(there.stdout)["steps"]
    assert [s["operation"] for s in steps] == ["load_dataset", "map"], there.stdout
    assert str(default) not in there.stderr, there.stderr
    assert invoke("explain", "--last", env=env).exit_code != 0  # no recorded run in the default root

    pid = _run_and_kill(tmp_path, env, "load.py", writes_in="other")  # killed while load_dataset builds
    assert not default.exists(), sorted(default.rglob("*"))
    doc = json.loads(invoke("explain", "--last", "--json", *other, env=env).stdout)
    assert doc["interrupted"]["state"] == "killed" and doc["interrupted"]["pid"] == pid, doc


def test_gc_temp_names_the_other_root_a_killed_run_wrote_in(tmp_path: Path) -> None:
    """A run SIGKILLed in a map after `load_from_disk` left its unfinished file in the saved folder, a
    cache root of its own. `explain --last` of the datasets cache says the run was killed outside
    its steps and points to the saved folder, where it names the map. `gc --temp` of the datasets
    cache (where the user looks after a killed run) names that root and the command for it, beside
    the dead run's lease, in human and JSON output; that command's plan lists the leftover, and
    removes it (with `--min-age 0`, as its kept line says). It said nothing of it: the leftover
    stayed for good."""
    (tmp_path / "saved.py").write_text(SAVED, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    pid = _run_and_kill(tmp_path, env, "saved.py", writes_in="my saved")
    (left,) = _tmp_sizes(tmp_path, "my saved")
    saved = (tmp_path / "my saved").resolve()
    command = f"`cachetool gc --temp --cache-dir '{saved}'`"  # quoted: the name has a space

    # explain --last of the datasets cache: the run was not in one of its steps (it said
    # "between steps"); the hint's command names the map and its unfinished file.
    here = invoke("explain", "--last", env=env, columns=250)
    assert f"The run was killed (process {pid} on " in here.stdout, here.stdout
    assert "), not in a step of this cache." in here.stdout and "between steps" not in here.stdout
    assert f"`cachetool explain --last --cache-dir '{saved}'`" in here.stderr, here.stderr
    there = invoke("explain", "--last", "--cache-dir", str(saved), env=env, columns=250).stdout
    assert "in map @ saved.py:12" in there and str(left) in there, there

    said = invoke("gc", "--temp", "--dry-run", env=env, columns=250)
    assert said.exit_code == 0, said.stderr
    lines = said.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"pid {pid} on "))
    assert lines[at + 1] == f"  it also wrote in {saved}, a cache root of its own: {command}", said.stdout
    doc = json.loads(invoke("gc", "--temp", "--dry-run", "--json", env=env).stdout)
    (lease,) = [x for x in doc["plan"]["leases"] if x["pid"] == pid]
    assert lease["state"] == "dead" and lease["also_in"] == [str(saved)], lease

    planned = invoke("gc", "--temp", "--dry-run", "--json", "--cache-dir", str(saved), env=env)
    kept = [Path(k["path"]) for k in json.loads(planned.stdout)["plan"]["skipped"]]
    assert left in kept, planned.stdout
    removed = invoke("gc", "--temp", "--min-age", "0", "-y", "--json", "--cache-dir", str(saved), env=env)
    assert removed.exit_code == 0, removed.stderr
    assert not left.exists()
    # The saved folder's lease of the run is gone with it: the datasets cache no longer points there.
    again = invoke("gc", "--temp", "--dry-run", env=env, columns=250).stdout
    assert f"pid {pid} on " in again and "also wrote in" not in again, again


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"


def test_a_killed_run_not_yet_reaped_is_dead_to_explain_and_gc(tmp_path: Path) -> None:
    """A run SIGKILLed in its map whose parent has not reaped it yet (a zombie: it runs no code and
    holds no file) is dead everywhere: `explain --last` says it was killed (it said "still
    running"), and `gc --temp` calls its lease stale in the same plan that removes its unfinished
    file as a killed writer's (it called the lease live while removing the file)."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    proc = _start_and_kill(tmp_path, env)
    try:
        deadline = time.monotonic() + 30
        while not _zombie(proc.pid):
            assert time.monotonic() < deadline, "the killed process never became a zombie"
            time.sleep(0.01)
        (left,) = _tmp_sizes(tmp_path)

        doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
        assert doc["interrupted"]["state"] == "killed" and doc["interrupted"]["pid"] == proc.pid, doc
        assert "still running" not in invoke("explain", "--last", env=env).stdout

        plan = json.loads(invoke("gc", "--temp", "--min-age", "0", "--dry-run", "--json", env=env).stdout)[
            "plan"
        ]
        (lease,) = [x for x in plan["leases"] if x["pid"] == proc.pid]
        assert lease["state"] == "dead", lease
        assert left in [Path(i["path"]) for i in plan["items"]], plan
        human = invoke("gc", "--temp", "--min-age", "0", "--dry-run", env=env, columns=250).stdout
        assert "live lease" not in human and f"pid {proc.pid} on " in human, human
    finally:
        proc.wait()


def test_stats_counts_the_step_a_run_was_killed_in(tmp_path: Path) -> None:
    """A traced run SIGKILLed in its map: `stats` counts that step as killed ("Steps killed
    (SIGKILL, OOM)", `"killed"` in `--json`); it counted the run's finished steps only, as if the
    run had been clean."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    _run_and_kill(tmp_path, env)
    assert "Steps killed (SIGKILL, OOM)       1" in invoke("stats", env=env, columns=80).stdout
    assert json.loads(invoke("stats", "--json", env=env).stdout)["killed"] == 1


def test_gc_temp_right_after_a_kill_offers_the_command_that_removes_what_the_dead_run_left(
    tmp_path: Path,
) -> None:
    """Right after a traced run is SIGKILLed in its map, README's `gc --temp -y` keeps its
    unfinished file (a resumable partial, kept a day) and says why it may go now: the run's
    process is gone and nothing holds the file, with the command that removes it; that command
    does. A plan refused for want of --yes says the dead run's lease "would be removed" and removes
    nothing (it said "its lease is removed"). The hint names the run that was killed in the map, not
    an earlier killed run whose lease had not expired yet when the file was written (it named the
    first dead lease that could have written it)."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    (tmp_path / "k.py").write_text(
        "import os, signal, sys\nfrom datasets import load_dataset\n"
        "load_dataset('csv', data_files=sys.argv[1], split='train')\nos.kill(os.getpid(), signal.SIGKILL)\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    earlier = cachetool_run("k.py", "d.csv", env=env, cwd=tmp_path, check=False, warm=True)
    assert earlier.returncode == -signal.SIGKILL, earlier.stderr[-2000:]
    pid = _run_and_kill(tmp_path, env)
    (left,) = _tmp_sizes(tmp_path)
    leases = list((tmp_path / "cache" / ".cachetool" / "leases").glob("*.json"))
    assert leases

    refused = invoke("gc", "--temp", "--min-age", "0", env=env, columns=250)
    assert refused.exit_code == 2 and "pass --yes" in refused.stderr, refused.stderr
    assert f"pid {pid} on " in refused.stdout and "its lease would be removed" in refused.stdout
    assert "is removed" not in refused.stdout, refused.stdout
    assert left.exists() and all(p.exists() for p in leases)

    said = invoke("gc", "--temp", "-y", env=env, columns=250)
    assert said.exit_code == 0, said.stderr
    assert left.exists()
    command = f"cachetool gc {left} --min-age 0 --cache-dir {tmp_path / 'cache'}"
    assert f"Hint: pid {pid} on " in said.stderr and f"`{command}` removes it now" in said.stderr, said.stderr
    assert said.stderr.count("Hint: pid ") == 1, said.stderr
    gone = invoke(*command.split()[1:], "-y", env=env)
    assert gone.exit_code == 0, gone.stderr
    assert not left.exists()


# Two maps; the second run finds the second map's cache file damaged (cut in half).
TWO_MAPS = textwrap.dedent(
    """\
    import sys
    from datasets import load_dataset

    def add_len(ex):
        return {"n": len(ex["text"])}

    def up(ex):
        return {"u": ex["text"].upper()}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    ds = ds.map(add_len)
    ds = ds.map(up)
    print("finished")
    """
)


def test_explain_last_says_the_run_failed_in_the_map_that_read_a_damaged_file(tmp_path: Path) -> None:
    """A run that died on a damaged cache file (`OSError: Expected to be able to read … bytes`):
    the ledger's run end records the exit status, the exception and the step it came out of, and
    `explain --last` says the run failed in that map, with the error and the `verify` command
    that finds the damaged file. It said "0 steps computed, 2 loaded … Nothing was recomputed"."""
    (tmp_path / "p.py").write_text(TWO_MAPS, encoding="utf-8")
    (tmp_path / "d.csv").write_text(
        "text\n" + "".join(f"row number {i}\n" for i in range(3000)), encoding="utf-8"
    )
    cache = tmp_path / "cache"
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(cache))
    cachetool_run("p.py", "d.csv", env=env, cwd=tmp_path, warm=True)
    up = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["steps"][-1]
    assert up["function"] == "up"
    damaged = next(cache.rglob(f"cache-{up['fingerprint']}.arrow"))
    os.truncate(damaged, damaged.stat().st_size // 2)
    failed = cachetool_run("p.py", "d.csv", env=env, cwd=tmp_path, check=False, warm=True)
    assert failed.returncode == 1 and "Expected to be able to read" in failed.stderr

    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    assert doc["interrupted"] is None
    ended = doc["failed"]
    assert ended["status"] == 1 and ended["exception"] == "OSError", ended
    assert "Expected to be able to read" in ended["message"]
    assert ended["step"]["operation"] == "map" and ended["step"]["call_site"]["line"] == 12, ended
    said = invoke("explain", "--last", env=env, columns=80)
    human = said.stdout
    assert "Nothing was recomputed" not in human, human
    assert "The run failed in map up @ p.py:12 (OSError: Expected to be able to read" in " ".join(
        human.split()
    ), human
    assert f"cachetool verify --cache-dir {cache}" in human, human
    assert said.exit_code == 0


def test_explain_last_says_a_module_run_failed_in_its_map(tmp_path: Path) -> None:
    """`cachetool run -m module` of a pipeline whose map raises: the run's end records the exit
    status, the exception and the step it came out of, as for a script, so `explain --last` says
    the run failed in that map (it said nothing about how a module run ended)."""
    (tmp_path / "boom.py").write_text(
        "import sys\nfrom datasets import load_dataset\n\n\ndef bad(ex):\n"
        "    raise ValueError('no such column')\n\n\n"
        "load_dataset('csv', data_files=sys.argv[1], split='train').map(bad)\n",
        encoding="utf-8",
    )
    (tmp_path / "d.csv").write_text("text\na\nb\n", encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    failed = cachetool_run("-m", "boom", "d.csv", env=env, cwd=tmp_path, check=False, warm=True)
    assert failed.returncode == 1 and "ValueError: no such column" in failed.stderr

    ended = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["failed"]
    assert ended["status"] == 1 and ended["exception"] == "ValueError", ended
    assert ended["message"] == "no such column" and ended["step"]["operation"] == "map", ended


def test_a_prefix_names_a_killed_num_proc_map_not_also_its_tmp_file(tmp_path: Path) -> None:
    """A `num_proc=2` map killed with its workers after shard 0 finished leaves shard 1's tmp file,
    whose header names `<fp>_00001_of_00002`: a prefix of `<fp>` names the map's shards, and
    `show`, `lineage` and `verify` take it (it was "ambiguous" with the tmp file)."""
    from tests.test_cmd_verify import kill_num_proc_map_after_shard_0

    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    cache = kill_num_proc_map_after_shard_0(tmp_path, env)
    (finished,) = cache.rglob("cache-*_00000_of_00002.arrow")
    prefix = finished.name.removeprefix("cache-")[:8]
    for command in ("show", "lineage", "verify"):
        said = invoke(command, prefix, "--cache-dir", str(cache), env=env)
        assert "ambiguous" not in said.stderr and said.exit_code in (0, 1), (command, said.stderr)


def test_a_killed_map_s_partial_is_one_a_traced_rerun_takes_back_in_every_command(tmp_path: Path) -> None:
    """A map SIGKILLed after writing complete batches: `ls` calls its tmp file `temp resumable`
    and `gc --temp` keeps it for a traced rerun. `explain --last` says the same of it (its rows,
    `resumable_rows` in JSON), not "datasets does not reuse these" followed only by the command
    that deletes it; `verify` calls it a resumable partial with its rows that a rerun under
    `cachetool run` takes back (its hint stays the gc command that removes it instead), not a
    "leftover temporary file of a killed writer"; `report` lists it as `temp resumable`. The
    rerun takes those rows back, and its explain says "resumed: N of 2,000 rows reused from the
    killed run of RUN" alone, not also that the killed attempt left "nothing was cached"."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    _run_and_kill(tmp_path, env)
    listed = json.loads(invoke("ls", "--json", env=env).stdout)["entries"]
    partial = next(e for e in listed if e["kind"] == "temp")
    assert partial["resumable"] and partial["rows"], partial

    human = invoke("explain", "--last", env=env, columns=80).stdout
    assert "does not reuse" not in human, human
    assert f"{partial['rows']:,} rows" in human and "traced rerun" in human, human
    written = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["interrupted"]["written"]
    assert [(w["path"], w["resumable_rows"]) for w in written] == [(partial["path"], partial["rows"])]

    doc = json.loads(invoke("verify", "--json", env=env).stdout)
    [finding] = [f for f in doc["findings"] if f["entry"] == partial["id"]]
    assert finding["severity"] == "warning", finding
    assert f"{partial['rows']:,} rows" in finding["problem"], finding
    assert "resumable" in finding["problem"] and "killed" in finding["problem"], finding
    assert "cachetool run" in finding["problem"] and finding["hint"].startswith("cachetool gc "), finding
    report = invoke("report", "-o", str(tmp_path / "r.html"), "--json", env=env)
    [problem] = [p for p in json.loads(report.stdout)["problems"] if p["path"] == partial["path"]]
    assert problem["what"].startswith("temp resumable, "), problem

    cachetool_run("p.py", "d.csv", str(tmp_path / "busy"), env=env, cwd=tmp_path, warm=True)
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    [step] = [s for s in doc["steps"] if s["operation"] == "map"]
    assert [r["kind"] for r in step["reasons"]] == ["resumed"], step["reasons"]
    human = invoke("explain", "--last", env=env, columns=80).stdout
    assert "resumed:" in human and "nothing was cached" not in human, human


def test_the_fingerprint_of_a_num_proc_map_killed_with_its_workers_names_its_step(tmp_path: Path) -> None:
    """A `num_proc=2` map SIGKILLed with its workers (the whole job ended) before either shard
    finished leaves one tmp file per worker, each naming `<fp>_0000N_of_00002`. `lineage` of the
    map's fingerprint (or a prefix) names the step and the killed run, and `explain` of it points
    at the killed run, and `show` of it names that step (`"unended"` in `--json`). Both said the
    name was "ambiguous" between the two tmp files (and naming one by its path, as that error
    told, said "it has no fingerprint"); with one tmp file holding a header, they took that shard
    for the map: "parent not recorded — run the pipeline with `cachetool run`", of a traced run;
    `show` said "the ledger records 0 step(s) that made it"."""
    (tmp_path / "p.py").write_text(
        PIPELINE.replace("writer_batch_size=50)", "writer_batch_size=50, num_proc=2)"), encoding="utf-8"
    )
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    proc = _busy_run(tmp_path, env, lambda: len(_tmp_sizes(tmp_path)) >= 2, group=True)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not list((tmp_path / "cache").rglob("cache-*_of_00002.arrow"))  # no shard finished

    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    fp = Path(doc["interrupted"]["step"]["paths"][0]).name.removeprefix("cache-").removesuffix(".arrow")
    for name in (fp, fp[:8]):
        said = invoke("lineage", name, env=env, columns=200)
        assert said.exit_code == 0 and "ambiguous" not in said.stderr, said.stderr
        assert "map @ p.py:12" in said.stdout and "killed" in said.stdout, said.stdout
        explained = invoke("explain", name, env=env, columns=200)
        assert "ambiguous" not in explained.stderr and "was killed in it" in explained.stderr, (
            explained.stderr
        )
        shown = invoke("show", name, env=env, columns=200)
        assert shown.exit_code == 0 and "0 step(s)" not in shown.stdout, shown.stdout + shown.stderr
        assert "map @ p.py:12" in shown.stdout and "killed in it" in shown.stdout, shown.stdout
    unended = json.loads(invoke("show", fp, "--json", env=env).stdout)["unended"]
    assert unended["operation"] == "map" and unended["run"] == doc["run"], unended


def test_explain_of_a_run_still_in_its_map_says_what_it_is_writing(tmp_path: Path) -> None:
    """`explain --last` while the traced run is still in its map: the run "is still running", and
    its unfinished file is one it is writing, not one "a traced rerun of the step takes back" nor
    one "datasets does not reuse", and no command to remove it is given."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    proc = _busy_run(tmp_path, env, lambda: any(_tmp_sizes(tmp_path).values()))
    try:
        human = invoke("explain", "--last", env=env, columns=80).stdout
    finally:
        proc.kill()
        proc.wait()
    assert "is still running" in human and "It is writing (unfinished):" in human, human
    assert "takes back" not in human and "does not reuse" not in human and "gc --temp" not in human, human


def _busy_run(
    tmp_path: Path, env: dict[str, str], ready: Callable[[], bool], *, group: bool = False
) -> subprocess.Popen[bytes] | forks.ForkedProcess:
    """`cachetool run p.py d.csv busy` started (`_warm`, in a session of its own with `group`),
    returned once the map says it is busy and `ready()` holds; its output goes to out.txt."""
    argv = [sys.executable, "-m", "cachetool", "run", "p.py", "d.csv", str(tmp_path / "busy")]
    with open(tmp_path / "out.txt", "wb") as sink:
        proc = _warm(argv, tmp_path, env, sink, group=group)
    deadline = time.monotonic() + 120
    try:
        while not (tmp_path / "busy").exists() or not ready():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "out.txt").read_text()
            time.sleep(0.01)
    except BaseException:
        proc.kill()
        raise
    return proc


def test_the_dead_run_hint_names_only_what_the_killed_run_may_have_left(tmp_path: Path) -> None:
    """A traced run is SIGKILLed in its map; right after, another traced run computes a map of its
    own (a complete cache file, written while the dead run's lease had not yet expired). `gc
    --temp --max-size` keeps that file as younger than --min-age, and its hint for the dead run names
    only the killed run's unfinished file, never the other run's complete result (it offered to
    remove both, as "left unfinished")."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    (tmp_path / "other.py").write_text(
        "from datasets import load_dataset\n"
        "load_dataset('csv', data_files='d.csv', split='train').map(lambda ex: {'z': ex['x'] + 1})\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    pid = _run_and_kill(tmp_path, env)
    (left,) = _tmp_sizes(tmp_path)
    before = set((tmp_path / "cache").rglob("cache-*.arrow"))
    cachetool_run("other.py", env=env, cwd=tmp_path, warm=True)
    (complete,) = set((tmp_path / "cache").rglob("cache-*.arrow")) - before

    said = invoke("gc", "--temp", "--max-size", "1B", "--dry-run", env=env, columns=250)
    assert said.exit_code == 0, said.stderr
    assert str(complete) not in said.stderr, said.stderr
    assert f"pid {pid} on " in said.stderr and str(left) in said.stderr, said.stderr


def test_a_run_beside_a_killed_one_says_how_long_before_it_that_one_began(tmp_path: Path) -> None:
    """Two traced runs of one pipeline on one cache: the second starts while the first is in its
    map, then the first is SIGKILLed and the second finishes. `explain --last` says the second
    computed the map because an attempt that began that long before it was killed (the two ran
    side by side), not as if a run killed long ago had left nothing."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(1200)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    first, second = tmp_path / "busy1", tmp_path / "busy2"

    def start(marker: Path) -> subprocess.Popen[bytes] | forks.ForkedProcess:
        # Forked warm: a cold second run, slow to start under load, found the first one's map
        # finished and loaded it, never computing beside it.
        cmd = [sys.executable, "-m", "cachetool", "run", "p.py", "d.csv", str(marker)]
        quiet = subprocess.DEVNULL
        if forks.available():
            return forks.ForkedProcess(
                cmd, env=env, cwd=tmp_path, stdout=quiet, stderr=quiet, preload=forks.PIPELINE
            )
        return subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=quiet, stderr=quiet)

    def wait_for(marker: Path, proc: subprocess.Popen[bytes] | forks.ForkedProcess) -> None:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)

    a = start(first)
    try:
        wait_for(first, a)
        b = start(second)
        wait_for(second, b)
    finally:
        a.kill()
        a.wait()
    assert b.wait(timeout=120) == 0
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    (step,) = [s for s in doc["steps"] if s["operation"] == "map"]
    (reason,) = step["reasons"]
    assert reason["kind"] == "killed-before" and "before this one" in reason["message"], reason


def test_ls_calls_a_partial_resumable_only_once_its_writer_is_gone(tmp_path: Path) -> None:
    """While a map writes its `tmp*` file, `ls` says the file is being written by that process,
    not that it is a resumable partial (a traced rerun takes back only what a killed run left);
    once the writer is SIGKILLed, the same file is a resumable partial."""
    (tmp_path / "p.py").write_text(PIPELINE, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    marker = tmp_path / "busy"
    cmd = [sys.executable, "p.py", "d.csv", str(marker)]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (marker.exists() and any(_tmp_sizes(tmp_path).values())):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        (writing,) = [
            e for e in json.loads(invoke("ls", "--json", env=env).stdout)["entries"] if e["kind"] == "temp"
        ]
        assert writing["resumable"] is False, writing
        assert any(f"being written by pid {proc.pid}" in p for p in writing["problems"]), writing
    finally:
        proc.kill()
        proc.wait()
    (left,) = [
        e for e in json.loads(invoke("ls", "--json", env=env).stdout)["entries"] if e["kind"] == "temp"
    ]
    assert left["resumable"] is True and left["path"] == writing["path"], left


def test_a_run_that_ends_by_os_exit_half_way_is_not_called_killed(tmp_path: Path) -> None:
    """A script that ends by `os._exit(N)` after its first map (skipping the code Python runs at
    exit): `cachetool run` exits N, and `explain --last` says the run failed with exit status N,
    or nothing about its end for 0. It said "The run was killed (process …)"."""
    (tmp_path / "p.py").write_text(
        "import os, sys\nfrom datasets import Dataset\n\n"
        "ds = Dataset.from_dict({'x': list(range(10))})\n"
        "ds = ds.map(lambda ex: {'y': ex['x']}, cache_file_name=os.path.abspath('c.arrow'))\n"
        "os._exit(int(sys.argv[1]))\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    for status in (5, 0):
        ended = cachetool_run("p.py", str(status), env=env, cwd=tmp_path, check=False, warm=True)
        assert ended.returncode == status, ended.stderr
        doc = json.loads(invoke("explain", "--last", "--json", "--cache-dir", str(tmp_path), env=env).stdout)
        assert doc["interrupted"] is None, doc["interrupted"]
        assert (doc["failed"] or {}).get("status") == (status or None), doc["failed"]
        human = invoke("explain", "--last", "--cache-dir", str(tmp_path), env=env, columns=80).stdout
        assert "killed" not in human, human
        assert ("The run failed (exit status 5)" in human) == (status == 5), human


def test_ctrl_c_in_a_num_proc_map_is_said_as_an_interrupt_not_the_pool_s_timeout(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the process group) during a `num_proc=2` map: `datasets`' pool then
    raises a `TimeoutError` and the script ends with exit status 1, as under plain python.
    `explain --last` says the run was interrupted (Ctrl-C) in that map; it said the run failed
    in it with a TimeoutError; `stats` counts the map as interrupted, not as a step that failed."""
    # Rows slow enough (20 s left) that a loaded machine cannot finish the map before Ctrl-C.
    script = PIPELINE.replace("writer_batch_size=50)", "writer_batch_size=50, num_proc=2)")
    (tmp_path / "p.py").write_text(script.replace("0.002 if", "0.02 if"), encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    proc = _start_and_kill(tmp_path, env, ctrl_c=True)
    assert proc.wait(timeout=60) == 1, (tmp_path / "out.txt").read_text()
    ended = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["failed"]
    assert ended["exception"] == "KeyboardInterrupt" and ended["step"]["operation"] == "map", ended
    human = " ".join(invoke("explain", "--last", env=env, columns=80).stdout.split())
    assert "The run was interrupted (Ctrl-C) in map slow @ p.py:12" in human, human
    assert "TimeoutError" not in human, human
    stats = invoke("stats", env=env, columns=80).stdout
    assert "Steps interrupted (Ctrl-C)        1" in stats and "failed" not in stats, stats


def test_a_num_proc_map_whose_worker_was_killed_is_resumed_without_nothing_was_cached(tmp_path: Path) -> None:
    """One `num_proc=2` worker SIGKILLed while the script lives: `datasets` raises "One of the
    subprocesses has abruptly died", the run exits 1 and `explain --last` says it failed in that
    map. The rerun takes back the rows the workers wrote, and its explain says the step failed
    when it last ran and what was reused, not also "nothing was cached"."""
    (tmp_path / "p.py").write_text(
        PIPELINE.replace("writer_batch_size=50)", "writer_batch_size=50, num_proc=2)"), encoding="utf-8"
    )
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(2000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    marker = tmp_path / "busy"
    with open(tmp_path / "out.txt", "wb") as sink:
        proc = _warm(
            [sys.executable, "-m", "cachetool", "run", "p.py", "d.csv", str(marker)], tmp_path, env, sink
        )
    deadline = time.monotonic() + 120
    while not marker.exists() or not any(_tmp_sizes(tmp_path).values()):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "out.txt").read_text()
        time.sleep(0.02)
    workers = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    os.kill(int(workers[0]), signal.SIGKILL)
    assert proc.wait(timeout=120) == 1
    said = " ".join(invoke("explain", "--last", env=env, columns=80).stdout.split())
    assert "The run failed in map slow @ p.py:12 (RuntimeError: One of the subprocesses" in said, said

    cachetool_run("p.py", "d.csv", str(marker), env=env, cwd=tmp_path, warm=True)
    said = " ".join(invoke("explain", "--last", env=env, columns=80).stdout.split())
    assert "it failed when it last ran" in said and "rows reused from" in said, said
    assert "nothing was cached" not in said, said


def test_a_sys_exit_inside_a_map_names_the_map_the_run_ended_in(tmp_path: Path) -> None:
    """A map whose function calls `sys.exit(3)` half-way: `cachetool run` exits 3 and `explain
    --last` says the run failed in that map with exit status 3 (it named no step, while `stats`
    counted the map as failed)."""
    (tmp_path / "p.py").write_text(
        "import sys\nfrom datasets import Dataset\n\n\ndef f(ex, i):\n    if i == 5:\n"
        "        sys.exit(3)\n    return {'y': i}\n\n\n"
        "Dataset.from_dict({'x': list(range(10))}).map(f, with_indices=True)\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    assert cachetool_run("p.py", env=env, cwd=tmp_path, check=False, warm=True).returncode == 3
    ended = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["failed"]
    assert ended["status"] == 3 and ended["step"]["operation"] == "map", ended
    human = " ".join(invoke("explain", "--last", env=env, columns=80).stdout.split())
    assert "The run failed in map f @ p.py:11 (exit status 3)." in human, human


def test_explain_last_of_a_run_that_filled_its_disk_says_so_not_a_damaged_file(tmp_path: Path) -> None:
    """A traced map that fills its cache's file system (`OSError: [Errno 28] No space left on
    device`): `explain --last` says the run failed in that map because the disk was full, with the
    command that lists what holds the room; it said "A cache file it read may be damaged" and
    gave `verify`, which finds nothing."""
    cache = tmp_path / "cache"
    cache.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", cache]).returncode
    ):
        pytest.skip("a small file system needs root to mount")
    try:
        (tmp_path / "p.py").write_text(
            "import datasets, sys\n"
            "datasets.Dataset.from_dict({'x': list(range(5000))}).save_to_disk(sys.argv[1])\n"
            "ds = datasets.load_from_disk(sys.argv[1])\n"
            "ds.map(lambda b: {'y': ['z' * 1000 for _ in b['x']]}, batched=True)\n",
            encoding="utf-8",
        )
        env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(cache))
        failed = cachetool_run("p.py", str(cache / "s"), env=env, cwd=tmp_path, check=False, warm=True)
        assert failed.returncode == 1 and "No space left on device" in failed.stderr, failed.stderr[-2000:]
        human = " ".join(invoke("explain", "--last", "--cache-dir", str(cache / "s"), env=env).stdout.split())
        assert (
            "The run failed in map <lambda> @ p.py:4 (OSError: [Errno 28] No space left on device)" in human
        )
        assert "may be damaged" not in human, human
        assert f"The disk was full: `cachetool ls --sort size --cache-dir {cache / 's'}` lists" in human, (
            human
        )
    finally:
        subprocess.run(["umount", "-l", cache], check=False)


def test_the_shards_a_failed_num_proc_map_left_name_the_step_that_raised(tmp_path: Path) -> None:
    """A traced `num_proc=2` map whose function raises on the last row: shard 0 is finished and
    lists as `shards 1/2`, with the map and its parent in `ls`. `lineage` and `explain` of it name
    the map and the exception it raised. `ls` showed no op nor parent, and they said "parent not
    recorded — run the pipeline with `cachetool run`" and "no recorded step that made it", of a
    pipeline that was run just so."""
    rows = "".join(f"{i},text {i}\n" for i in range(50))
    (tmp_path / "d.csv").write_text("id,text\n" + rows, encoding="utf-8")
    (tmp_path / "p.py").write_text(
        "from datasets import load_dataset\n\n\ndef bad(ex):\n    if ex['id'] == 49:\n"
        "        raise ValueError('row 49 is bad')\n    return {'n': len(ex['text'])}\n\n\n"
        "load_dataset('csv', data_files='d.csv', split='train').map(bad, num_proc=2)\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    assert cachetool_run("p.py", env=env, cwd=tmp_path, check=False, warm=True).returncode == 1
    (shard,) = (tmp_path / "cache").rglob("cache-*_00000_of_00002.arrow")
    fp = shard.name.removeprefix("cache-")[:16]
    said = {c: invoke(c, fp, env=env, columns=200) for c in ("lineage", "explain")}
    for command, got in said.items():
        text = " ".join((got.stdout + got.stderr).split())
        assert "map @ p.py:10" in text and "ValueError: row 49 is bad" in text, (command, text)
        assert "cachetool run" not in text and "killed" not in text, (command, text)
    assert json.loads(invoke("lineage", fp, "--json", env=env).stdout)["unended"]["operation"] == "map"
    listed = {e["fingerprint"]: e for e in json.loads(invoke("ls", "--json", env=env).stdout)["entries"]}
    (source,) = (e["fingerprint"] for e in listed.values() if e["kind"] == "source")
    assert (listed[fp]["operation"], listed[fp]["parent"]) == ("map", source), listed[fp]


def test_explain_last_of_a_run_killed_in_save_to_disk_names_the_unfinished_folder(tmp_path: Path) -> None:
    """A traced run SIGKILLed while `save_to_disk` writes its shards: `explain --last` says it was
    killed in save_to_disk, names the folder it left without state.json and the command that
    removes it, which works as printed. It said "killed between steps" and nothing of the folder."""
    (tmp_path / "s.py").write_text(
        "from datasets import Dataset\n\n"
        "Dataset.from_dict({'t': ['x' * 2000] * 20000}).save_to_disk('my saved', num_shards=200)\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"), COLUMNS="200")
    folder = tmp_path / "my saved"
    with open(tmp_path / "out.txt", "wb") as sink:
        proc = _warm([sys.executable, "-m", "cachetool", "run", "s.py"], tmp_path, env, sink)
    try:
        deadline = time.monotonic() + 120
        while not (folder / "data-00003-of-00200.arrow").exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "out.txt").read_text()
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    assert not (folder / "state.json").exists(), "the save finished before it could be killed"
    human = " ".join(invoke("explain", "--last", env=env).stdout.split())
    assert f"killed (process {proc.pid} on " in human and ") in save_to_disk @ s.py:3," in human, human
    assert f"It left {folder} unfinished (no state.json" in human and "between steps" not in human, human
    interrupted = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["interrupted"]
    step = interrupted["step"]
    assert step["operation"] == "save_to_disk" and step["paths"] == [str(folder)], interrupted
    command = human[human.index("rm -r ") :]
    subprocess.run(command, shell=True, check=True, cwd="/")
    assert not folder.exists()


# A DatasetDict save that stops in its second split (test) once it has written there, until killed.
HALF_SAVED = textwrap.dedent(
    """\
    import os, time
    from pathlib import Path
    import datasets.arrow_writer as aw
    from datasets import Dataset, DatasetDict

    write = aw.ArrowWriter.write_table

    def write_then_wait_in_test(self, table, *args, **kwargs):
        write(self, table, *args, **kwargs)
        if f"{os.sep}test{os.sep}" in str(self._path):
            Path("busy").write_text("busy")
            time.sleep(600)

    aw.ArrowWriter.write_table = write_then_wait_in_test
    parts = {s: Dataset.from_dict({"x": list(range(100))}) for s in ("train", "test")}
    DatasetDict(parts).save_to_disk("data/my saved")
    """
)


def _hint_command(hint: str) -> str:
    """The command quoted in a verify hint (`... `CMD` ...`), or the hint after "; " when unquoted."""
    return hint.split("`")[1] if "`" in hint else hint.rpartition("; ")[2]


def test_a_datasetdict_save_killed_in_a_split_is_one_unfinished_dict_for_explain_gc_and_verify(
    tmp_path: Path,
) -> None:
    """A traced `DatasetDict.save_to_disk` SIGKILLed while it writes its second split: explain,
    gc and verify all name the DatasetDict's folder, and what their hints remove is that whole
    folder. They named the split's subfolder (explain until it was fixed, gc and verify after):
    removing it as printed left a `dataset_dict.json` naming a split that is gone, a folder
    `load_from_disk` cannot read, which verify then called clean. While the save runs, gc keeps
    the folder (its writer holds a file in it) and verify says it is being written."""
    (tmp_path / "s.py").write_text(HALF_SAVED, encoding="utf-8")
    (tmp_path / "data").mkdir()
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    data, folder = tmp_path / "data", tmp_path / "data" / "my saved"
    with open(tmp_path / "out.txt", "wb") as sink:
        proc = _warm([sys.executable, "-m", "cachetool", "run", "s.py"], tmp_path, env, sink)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "busy").exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "out.txt").read_text()
            time.sleep(0.01)
        live = json.loads(
            invoke("gc", "--temp", "--min-age", "0", "-n", "--json", "--cache-dir", str(data), env=env).stdout
        )["plan"]
        assert live["items"] == [], live
        kept = [(s["path"], s["code"]) for s in live["skipped"] if s["scope"] == "root"]
        assert kept == [(str(folder), "in-use")], live
        writing = json.loads(invoke("verify", "--json", "--cache-dir", str(data), env=env).stdout)["findings"]
        assert [(f["path"], f["severity"]) for f in writing] == [(str(folder), "info")], writing
        assert "being written by pid" in writing[0]["problem"], writing
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (folder / "train" / "state.json").is_file() and not (folder / "test" / "state.json").exists()
    # The ledger names the save's writer and it is gone: verify says so at once, not in 5 minutes.
    found = json.loads(invoke("verify", "--json", "--cache-dir", str(data), env=env).stdout)["findings"]
    assert [(f["path"], f["severity"]) for f in found] == [(str(folder), "error")], found
    assert "its split test has no state.json: an interrupted save_to_disk" in found[0]["problem"], found

    human = " ".join(invoke("explain", "--last", env=env, columns=200).stdout.split())
    assert ") in save_to_disk @ s.py:16," in human, human
    assert f"It left {folder} unfinished (its split test has no state.json" in human, human
    assert f"{folder}/test" not in human, human
    assert human[human.index("rm -r ") :] == f"rm -r '{folder}'", human

    plan = json.loads(
        invoke("gc", "--temp", "--min-age", "0", "-n", "--json", "--cache-dir", str(data), env=env).stdout
    )["plan"]
    assert [(i["path"], i["paths"], i["kind"]) for i in plan["items"]] == [
        (str(folder), [str(folder)], "incomplete-save")
    ], plan
    assert "its split test has no state.json" in plan["items"][0]["reason"], plan
    # Its own cache root (where the run's lease is): gc never removes the root, and says how to.
    own = json.loads(invoke("gc", "--temp", "-n", "--json", "--cache-dir", str(folder), env=env).stdout)[
        "plan"
    ]
    assert own["items"] == [] and own["hints"] == [], own
    assert [(s["path"], s["code"]) for s in own["skipped"] if s["scope"] == "root"] == [
        (str(folder), "cache-root")
    ], own
    assert f"rm -r '{folder}'" in own["skipped"][0]["reason"], own

    # verify calls a save interrupted once its last write is 5 minutes old.
    old = time.time() - 3600
    for p in [folder, *folder.rglob("*")]:
        os.utime(p, (old, old), follow_symlinks=False)
    copy = tmp_path / "copy" / "my saved"
    shutil.copytree(folder, copy, symlinks=True)
    for where, root in ((copy, copy), (folder, data)):
        found = json.loads(invoke("verify", "--json", "--cache-dir", str(root), env=env).stdout)["findings"]
        assert [(f["path"], f["severity"]) for f in found] == [(str(where), "error")], found
        assert found[0]["problem"] == "its split test has no state.json: an interrupted save_to_disk", found
        command = _hint_command(found[0]["hint"])
        if where == root:  # verify --quarantine moves nothing out of the root (it said it would)
            moves = json.loads(
                invoke("verify", "-n", "--quarantine", "--json", "--cache-dir", str(root), env=env).stdout
            )
            assert moves["would_quarantine"] == [], moves
        if command.startswith("rm "):
            assert command == f"rm -r '{where}'", found
            subprocess.run(command, shell=True, check=True, cwd="/")
        else:
            assert command.split()[:2] == ["cachetool", "gc"] and str(where) in found[0]["hint"], found
            removed = invoke(*shlex.split(command)[1:], "--yes", env=env)
            assert removed.exit_code == 0, removed.stdout + removed.stderr
        assert not where.exists()
        after = json.loads(invoke("verify", "--json", "--cache-dir", str(where.parent), env=env).stdout)
        assert after["findings"] == [], after


def test_a_save_killed_over_an_earlier_save_says_its_state_json_is_the_earlier_one(tmp_path: Path) -> None:
    """A traced run SIGKILLed between two shards of a `save_to_disk` over a folder an earlier save
    wrote: the folder keeps the earlier state.json over data files of both saves. `explain --last`
    says so and gives the `rm -r` of the folder; it said "no state.json: load_from_disk cannot
    read it" of a folder that has one, which load_from_disk reads as a mix of the two saves."""
    (tmp_path / "s.py").write_text(
        "import os, signal, sys\n"
        "import datasets.arrow_writer as aw\n"
        "from datasets import Dataset\n\n"
        "close = aw.ArrowWriter.close\n\n\n"
        "def close_then_die_after_shard_1(self):\n"
        "    close(self)\n"
        "    if 'data-00001-of' in str(self._path):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n\n\n"
        "if sys.argv[1:2] == ['again']:\n"
        "    aw.ArrowWriter.close = close_then_die_after_shard_1\n"
        "Dataset.from_dict({'x': [len(sys.argv)] * 100}).save_to_disk("
        "(sys.argv[2:] or ['my saved'])[0], num_shards=4)\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    cachetool_run("s.py", env=env, cwd=tmp_path, warm=True)
    folder = tmp_path / "my saved"
    earlier = time.time() - 3600  # the earlier save, an hour ago
    for f in folder.iterdir():
        os.utime(f, (earlier, earlier))
    assert invoke("verify", "--cache-dir", str(folder), env=env).exit_code == 0
    killed = cachetool_run("s.py", "again", env=env, cwd=tmp_path, check=False, warm=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (folder / "state.json").is_file()
    # Every file is whole, but two are the second save's: verify says so (it said all was well).
    doc = json.loads(invoke("verify", "--json", "--cache-dir", str(folder), env=env).stdout)
    (found,) = [f for f in doc["findings"] if f["severity"] == "error"]
    assert "data-00000-of-00004.arrow, data-00001-of-00004.arrow written after state.json" in found["problem"]
    assert invoke("verify", "--cache-dir", str(folder), env=env).exit_code == 1
    # ls and show tell the folder as verify does: a mixed save, not a complete saved dataset.
    (listed,) = json.loads(invoke("ls", "--json", str(folder), env=env).stdout)["entries"]
    assert listed["complete"] is False, listed
    assert any(found["problem"] in p for p in listed["problems"]), listed
    ls_human = invoke("ls", str(folder), env=env, columns=200)
    assert "saved mixed" in ls_human.stdout, ls_human.stdout
    assert "written after state.json" in ls_human.stderr, ls_human.stderr
    shown = " ".join(invoke("show", str(folder), env=env, columns=200).stdout.split())
    assert "complete NO" in shown, shown
    assert "problem: data-00000-of-00004.arrow, data-00001-of-00004.arrow written after state.json" in shown
    copy = tmp_path / "copy"  # a copy that does not keep times is a fresh folder, not a mix
    shutil.copytree(folder, copy, copy_function=shutil.copyfile)
    os.utime(copy / "data-00003-of-00004.arrow", (time.time() + 5, time.time() + 5))
    assert invoke("verify", "--cache-dir", str(copy), env=env).exit_code == 0
    human = " ".join(invoke("explain", "--last", env=env, columns=200).stdout.split())
    assert ") in save_to_disk @ s.py:16," in human, human
    assert "no state.json" not in human, human
    left = f"It left {folder} unfinished (an earlier save's state.json, over data files of both saves:"
    assert left in human, human
    assert human[human.index("rm -r ") :].startswith(f"rm -r '{folder}'"), human
    # Killed in a fresh folder: the ledger names the save's writer, and it is gone, so verify says
    # at once that the save was interrupted (it said "verify again later" for 5 minutes).
    fresh = tmp_path / "fresh"
    killed = cachetool_run("s.py", "again", "fresh", env=env, cwd=tmp_path, check=False, warm=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (fresh / "state.json").exists()
    result = invoke("verify", "--json", "--cache-dir", str(fresh), env=env)
    (found,) = json.loads(result.stdout)["findings"]
    assert (found["severity"], result.exit_code) == ("error", 1), found
    assert found["problem"].startswith("data-*.arrow without state.json: an interrupted save_to_disk"), found
    assert found["hint"] == f"save it again, or remove the folder: `rm -r {fresh}`", found
