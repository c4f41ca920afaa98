"""A traced map SIGKILLed part way gives its work back: the rerun reuses the complete record batches
the killed run wrote, computes only the rest, and writes what an uninterrupted run writes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from cachetool.cache.arrow import read_summary

try:  # tests/ may or may not be a package
    from tests import forks
    from tests.conftest import cachetool_run, invoke
    from tests.lineage_pipeline import subprocess_env
    from tests.test_killed_run import _run_and_kill
except ImportError:
    import forks  # type: ignore[no-redef]
    from conftest import cachetool_run, invoke  # type: ignore[no-redef]
    from lineage_pipeline import subprocess_env  # type: ignore[no-redef]
    from test_killed_run import _run_and_kill  # type: ignore[no-redef]

pytestmark = pytest.mark.slow

# The goal is stated for 200,000 rows (benchmarks/bench_resume.py runs that); a quarter shows the same.
ROWS = 50_000

# The map slows down (and says so) at row KILL_AT, read at run time so that the fingerprint is the
# same in the killed run, the rerun and the uninterrupted run.
PIPELINE = textwrap.dedent(
    """\
    import os, sys, time
    from pathlib import Path
    from datasets import load_dataset

    def f(ex, idx, rank=None):
        at = int(os.environ.get("KILL_AT", -1))
        last = idx[-1] if isinstance(idx, list) else idx
        if 0 <= at <= last:
            Path(sys.argv[2]).write_text("busy")
            time.sleep(0.01)
        if isinstance(idx, list):
            y = [x * 2 + i for x, i in zip(ex["x"], idx)]
            out = {"y": y[::STRIDE], "s": [str(i) for i in idx][::STRIDE]}
            return out if rank is None else {**out, "r": [rank] * len(out["y"])}
        return {"y": ex["x"] * 2 + idx, "s": str(idx), **({} if rank is None else {"r": rank})}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    ds = ds.map(f, with_indices=True, MAP_ARGS)
    print("finished", ds._fingerprint)
    """
)


def _table(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_stream(source).read_all()


def _kill_group(tmp_path: Path, env: dict[str, str]) -> None:
    """`cachetool run p.py` SIGKILLed with its `num_proc` workers (the OOM killer or a scheduler
    ending the job) once the map says it is busy: every worker's `tmp*` file stays. Forked warm in
    a session of its own (`forks.PIPELINE`: these pipelines hash no set nor str)."""
    marker = tmp_path / "busy"
    marker.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "cachetool", "run", "p.py", "d.csv", str(marker)]
    proc: forks.ForkedProcess | subprocess.Popen[bytes]
    with open(tmp_path / "out.txt", "wb") as sink:
        if forks.available():
            proc = forks.ForkedProcess(
                argv,
                env=env,
                cwd=tmp_path,
                stdout=sink,
                stderr=subprocess.STDOUT,
                preload=forks.PIPELINE,
                start_new_session=True,
            )
        else:
            proc = subprocess.Popen(
                argv, env=env, cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "out.txt").read_text()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


#: `shared(script, rows)`: the folder of a pipeline and its uninterrupted run.
Shared = Callable[[str, int], tuple[Path, "Reference"]]


class Reference:
    """The uninterrupted run of a pipeline, forked warm (`forks.PIPELINE`: these pipelines hash
    no set nor str), its stderr kept in a file beside its cache."""

    def __init__(self, case: Path) -> None:
        self.err = case / "reference.err"
        argv = [sys.executable, "-m", "cachetool", "run", "p.py", "d.csv", "-"]
        env = subprocess_env(case, HF_DATASETS_CACHE=str(case / "reference"))
        with open(self.err, "wb") as err:
            if forks.available():
                self.proc: forks.ForkedProcess | subprocess.Popen[bytes] = forks.ForkedProcess(
                    argv, env=env, cwd=case, stdout=subprocess.DEVNULL, stderr=err, preload=forks.PIPELINE
                )
            else:
                self.proc = subprocess.Popen(argv, env=env, cwd=case, stdout=subprocess.DEVNULL, stderr=err)

    def finished(self, timeout: float) -> bool:
        """Whether it ended well (waiting for it at most `timeout` seconds)."""
        return self.proc.wait(timeout=timeout) == 0

    def why(self) -> str:
        return self.err.read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """`shared(script, rows)`: a folder holding the pipeline `script` as p.py and a d.csv of
    `rows` rows, and the uninterrupted run of it started there (its cache `reference/`), both made
    once for the module's tests of that pipeline: `datasets` hashes the data file's path and time
    into the fingerprints, so each of them runs the pipeline in that folder (its own cache given
    by HF_DATASETS_CACHE) to compare with that run."""
    made: dict[tuple[str, int], tuple[Path, Reference]] = {}

    def make(script: str, rows: int) -> tuple[Path, Reference]:
        if (script, rows) not in made:
            case = tmp_path_factory.mktemp("pipeline")
            (case / "p.py").write_text(script, encoding="utf-8")
            (case / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(rows)), encoding="utf-8")
            made[script, rows] = (case, Reference(case))
        return made[script, rows]

    yield make
    for _, reference in made.values():
        reference.proc.kill()
        reference.proc.wait()


CASES = {
    "examples": ("writer_batch_size=500", 0.6, 0.85),
    "batched": ("batched=True, batch_size=700", 0.6, 0.85),
    # The second worker's rows start half way: killed at 60-90% of the whole map.
    "num_proc": ("batched=True, batch_size=700, num_proc=2", 0.8, 0.95),
    # Each worker's rows are computed with its rank: the resumed rows too.
    "with_rank": ("batched=True, batch_size=700, num_proc=2, with_rank=True", 0.8, 0.95),
    # A batched map that returns fewer rows than it is given: its output rows are not its input
    # rows, so nothing is reused (the rows must still be those of an uninterrupted run).
    "fewer-rows": ("batched=True, batch_size=700, remove_columns=['x']", 0.6, 0.85),
}


# Where in its range each case is killed: the three the goal names early and late in it.
KILL_POINTS = [
    (case, part)
    for case in CASES
    for part in (("early", "late") if case in ("examples", "batched", "num_proc") else ("any",))
]


@pytest.mark.parametrize(("case", "part"), KILL_POINTS, ids=[f"{c}-{p}" for c, p in KILL_POINTS])
def test_a_rerun_resumes_a_map_killed_part_way(
    tmp_path: Path,
    case: str,
    part: str,
    shared: Shared,
) -> None:
    """A 50,000-row map (one example at a time, batches of 700, or batches in 2 processes)
    SIGKILLed at 60-90% (early and late in that range): the rerun reuses at least 90% of the rows
    the killed run had completed, and its cache files hold the same tables, schemas and schema
    metadata as an uninterrupted run's (the same fingerprint); its explain says it resumed, not
    that the step ran for the first time ("resumed: N of 50,000 rows reused from the killed run
    of RUN", from the ledger); no `tmp*` file is left, and the run after that loads the files as
    an ordinary cache hit."""
    args, low, high = CASES[case]
    mid = (low + high) / 2
    low, high = {"early": (low, mid), "late": (mid, high)}.get(part, (low, high))
    stride = 2 if case == "fewer-rows" else 1
    script = PIPELINE.replace("MAP_ARGS", args).replace("STRIDE", "2" if case == "fewer-rows" else "1")
    # The uninterrupted run, in a cache of its own, runs while the other is killed.
    folder, reference = shared(script, ROWS)
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    kill_at = random.Random().randrange(int(ROWS * low), int(ROWS * high))
    if case in ("num_proc", "with_rank"):
        _kill_group(folder, {**env, "KILL_AT": str(kill_at)})
    else:
        _run_and_kill(folder, {**env, "KILL_AT": str(kill_at)}, writes_in=str(tmp_path / "cache"))
    killed_doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    killed = killed_doc["run"]
    partials = list((tmp_path / "cache").rglob("tmp*"))
    completed = sum(read_summary(p).rows or 0 for p in partials)  # their complete record batches
    assert partials and completed >= (0 if "num_proc=2" in args else kill_at * 0.95 / stride), completed
    # explain of the killed run offers its partial output as what a rerun reuses, not as waste.
    cut = killed_doc["interrupted"]
    assert sum(f["resumable_rows"] for f in cut["written"]) == completed, cut["written"]
    if completed:
        told = " ".join(invoke("explain", "--last", env=env, columns=200).stdout.split())
        assert "Its partial output (a traced rerun of the pipeline reuses these rows" in told, told
        assert f"{max(f['resumable_rows'] for f in cut['written']):,} rows" in told, told
    for p in partials:  # killed in the middle of writing a batch: that batch is not reused
        if p.stat().st_size > 100:  # a worker killed as it began holds less than a schema
            os.truncate(p, p.stat().st_size - 100)

    out = cachetool_run("p.py", "d.csv", "-", env=env, cwd=folder, warm=True)
    fp = out.stdout.split()[-1]
    assert reference.finished(timeout=120), reference.why()
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    (step,) = [s for s in doc["steps"] if s["operation"] == "map"]
    said = [r["message"] for r in step["reasons"] if r["kind"] == "resumed"]
    if case == "fewer-rows":
        assert not said, said
    else:
        reused = int(said[0].split()[1].replace(",", ""))
        assert said == [f"resumed: {reused:,} of {ROWS:,} rows reused from the killed run of {killed}"]
        assert completed >= reused >= 0.9 * completed, (reused, completed)
        human = " ".join(invoke("explain", "--last", env=env, columns=200).stdout.split())
        # Its killed run began the step: not "the first time this step ran".
        assert said[0] in human and "first time" not in human and "nothing was cached" not in human, human
        assert "first-run" not in [r["kind"] for r in step["reasons"]], step

    mine = sorted((tmp_path / "cache").rglob(f"cache-{fp}*.arrow"))
    theirs = sorted((folder / "reference").rglob(f"cache-{fp}*.arrow"))
    assert [p.name for p in mine] == [p.name for p in theirs] and mine
    for m, t in zip(mine, theirs, strict=True):
        got, want = _table(m), _table(t)
        assert got.schema.equals(want.schema, check_metadata=True), (got.schema, want.schema)
        assert got.equals(want)
        assert oct(m.stat().st_mode & 0o777) == oct(t.stat().st_mode & 0o777)
    # The partial files given back are removed; one not reused stays, untouched, for gc: all of
    # them when the rows differ, else only a worker's killed before it wrote a whole batch.
    left = list((tmp_path / "cache").rglob("tmp*"))
    if case == "fewer-rows":
        assert left == partials
    else:
        assert set(left) <= set(partials) and not any(read_summary(p).rows for p in left), left

    cachetool_run("p.py", "d.csv", "-", env=env, cwd=folder, warm=True)
    again = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    assert again["computed"] == 0 and again["loaded"] == 2, again  # the CSV and the map
    assert [os.stat(p).st_ino for p in mine] == [
        p.stat().st_ino for p in sorted((tmp_path / "cache").rglob(f"cache-{fp}*.arrow"))
    ]


def test_a_run_killed_while_it_resumes_leaves_the_first_run_s_rows_resumable(tmp_path: Path) -> None:
    """A map SIGKILLed, then SIGKILLed again while its rerun resumes it: the third run still
    reuses the first run's rows (credited to that run), and its file holds every row right."""
    (tmp_path / "p.py").write_text(PIPELINE.replace("MAP_ARGS", "batched=True, batch_size=100"))
    (tmp_path / "p.py").write_text((tmp_path / "p.py").read_text().replace("STRIDE", "1"))
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20_000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"), KILL_AT="10000")
    _run_and_kill(tmp_path, env)
    first = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["run"]
    (partial,) = (tmp_path / "cache").rglob("tmp*")
    rows = read_summary(partial).rows or 0
    # `ls` shows it as a resumable partial with its rows; `gc --temp` keeps it for a day unless
    # named or given --min-age, and says why.
    (entry,) = [
        e for e in json.loads(invoke("ls", "--json", env=env).stdout)["entries"] if e["kind"] == "temp"
    ]
    assert (entry["resumable"], entry["rows"], entry["path"]) == (True, rows, str(partial)), entry
    assert "temp resumable" in invoke("ls", env=env, columns=200).stdout
    plan = json.loads(invoke("gc", "--temp", "--dry-run", "--json", env=env).stdout)["plan"]
    (kept,) = [k for k in plan["skipped"] if k["path"] == str(partial)]
    assert kept["code"] == "resumable" and f"({rows:,} rows)" in kept["reason"], kept
    plan = json.loads(invoke("gc", "--temp", "--dry-run", "--json", "--min-age", "0", env=env).stdout)["plan"]
    assert str(partial) in [i["path"] for i in plan["items"]], plan
    named = json.loads(invoke("gc", str(partial), "--dry-run", "--json", env=env).stdout)["plan"]
    assert [k["code"] for k in named["skipped"] if k["path"] == str(partial)] == ["too-young"], named
    _run_and_kill(tmp_path, env)  # in the rest of the map, after the first 10,000 rows
    assert partial.exists()

    out = cachetool_run("p.py", "d.csv", "-", env={**env, "KILL_AT": "-1"}, cwd=tmp_path, warm=True)
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    (step,) = [s for s in doc["steps"] if s["operation"] == "map"]
    said = [r["message"] for r in step["reasons"] if r["kind"] == "resumed"]
    assert said == [f"resumed: {rows:,} of 20,000 rows reused from the killed run of {first}"], said
    (done,) = (tmp_path / "cache").rglob(f"cache-{out.stdout.split()[-1]}.arrow")
    table = _table(done).to_pydict()
    assert table["y"] == [i * 3 for i in range(20_000)] and table["s"] == [str(i) for i in range(20_000)]
    assert not partial.exists()


def test_a_rerun_told_not_to_load_from_the_cache_computes_everything(tmp_path: Path) -> None:
    """`load_from_cache_file=False` on the rerun of a killed map: nothing is resumed (the map would
    compute everything anyway), and the killed run's file is left as it was."""
    script = PIPELINE.replace("STRIDE", "1")
    (tmp_path / "p.py").write_text(script.replace("MAP_ARGS", "batched=True, batch_size=100"))
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20_000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    _run_and_kill(tmp_path, {**env, "KILL_AT": "10000"})
    (partial,) = (tmp_path / "cache").rglob("tmp*")
    size = partial.stat().st_size
    again = script.replace("MAP_ARGS", "batched=True, batch_size=100, load_from_cache_file=False")
    (tmp_path / "p.py").write_text(again)
    cachetool_run("p.py", "d.csv", "-", env=env, cwd=tmp_path, warm=True)
    said = invoke("explain", "--last", "--json", env=env).stdout
    assert json.loads(said)["uncached"] and "resumed" not in said, said
    assert partial.stat().st_size == size


def _gc_plan(env: dict[str, str], *args: str) -> tuple[list[str], dict[str, str]]:
    """The paths `gc --dry-run ARGS` would remove from the cache, and those it keeps with the code
    of why (what it would do in the temp dir left out)."""
    cache = env["HF_DATASETS_CACHE"]
    plan = json.loads(invoke("gc", "--cache-dir", cache, "--dry-run", "--json", *args, env=env).stdout)[
        "plan"
    ]
    kept = {s["path"]: s["code"] for s in plan["skipped"] if s["path"].startswith(cache)}
    return [i["path"] for i in plan["items"] if i["path"].startswith(cache)], kept


def test_gc_temp_keeps_a_resumable_partial_only_while_nothing_else_is_said_of_it(tmp_path: Path) -> None:
    """`gc --temp` (and `gc_cache(temp=True)`) keeps a killed map's resumable partial for a day, but
    one named on its command line goes (`gc --temp PATH` as `gc PATH`), as with `--min-age` given,
    and one a live process holds is kept as in use by that process, not as a partial a rerun will
    take back. `show` of its fingerprint calls it resumable, with its rows."""
    env, partial = _killed_batched_map(tmp_path)
    hours_ago = time.time() - 2 * 3600  # past the default --min-age 1h, within the day
    os.utime(partial, (hours_ago, hours_ago))
    assert _gc_plan(env, "--temp") == ([], {str(partial): "resumable"})
    assert _gc_plan(env, "--temp", str(partial)) == ([str(partial)], {})
    # The same from Python; and `show` of the fingerprint says what the file is.
    from cachetool import gc_cache

    run = gc_cache(env["HF_DATASETS_CACHE"], temp=True, tmp_dir=tmp_path, dry_run=True)
    assert partial not in [i.path for i in run.plan.items]
    assert [s.code for s in run.plan.skipped if s.path == partial] == ["resumable"]
    run = gc_cache(env["HF_DATASETS_CACHE"], temp=True, tmp_dir=tmp_path, min_age="30m", dry_run=True)
    assert partial in [i.path for i in run.plan.items]
    summary = read_summary(partial)
    shown = invoke(
        "show", "--cache-dir", env["HF_DATASETS_CACHE"], str(summary.fingerprint), env=env, columns=200
    )
    assert "temp resumable" in shown.stdout and f"holding {summary.rows:,} rows" in shown.stdout, shown.stdout

    hold = "import sys; f = open(sys.argv[1], 'rb'); print(flush=True); sys.stdin.read()"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(partial)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"\n"
        assert _gc_plan(env, "--temp") == ([], {str(partial): "in-use"})
    finally:
        holder.communicate(b"")


def _killed_batched_map(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A batched map of 20,000 rows SIGKILLed at row 10,000 in `tmp_path`: its env and partial."""
    script = PIPELINE.replace("MAP_ARGS", "batched=True, batch_size=100").replace("STRIDE", "1")
    (tmp_path / "p.py").write_text(script, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20_000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"), KILL_AT="10000")
    _run_and_kill(tmp_path, env)
    (partial,) = (tmp_path / "cache").rglob("tmp*")
    return env, partial


def test_a_full_fingerprint_names_its_result_not_a_killed_run_s_partial_of_it(tmp_path: Path) -> None:
    """Two runs of one pipeline on one cache, one SIGKILLed mid-map while the other (untraced, so it
    does not take the partial back) finishes: the killed run's `tmp*` partial is made under the same
    fingerprint as the finished result, and `show`, `lineage` and `pin` given that full fingerprint
    (or a prefix of it) name the result, not "ambiguous"."""
    env, partial = _killed_batched_map(tmp_path)
    done = subprocess.run(
        [sys.executable, "p.py", "d.csv", "-"],
        env={**env, "KILL_AT": "-1"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    fp = done.stdout.split()[-1]
    assert partial.exists() and read_summary(partial).fingerprint == fp
    cache = env["HF_DATASETS_CACHE"]
    result = invoke("show", fp, "--cache-dir", cache, "--json", env=env)
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert (shown["kind"], shown["fingerprint"]) == ("derived", fp)
    assert invoke("lineage", fp, "--cache-dir", cache, env=env).exit_code == 0
    prefix = json.loads(invoke("show", fp[:6], "--cache-dir", cache, "--json", env=env).stdout)
    assert prefix["fingerprint"] == fp
    pinned = invoke("pin", fp, "--cache-dir", cache, env=env)
    assert pinned.exit_code == 0, pinned.stderr


def test_a_killed_filter_s_tmp_file_is_not_called_resumable(tmp_path: Path) -> None:
    """A `filter` SIGKILLed part way leaves an indices `tmp*` file under the filter's fingerprint,
    but a filter does not resume: `ls` lists it as a plain `temp` and `gc --temp` removes it once
    older than `--min-age`, as any leftover."""
    (tmp_path / "p.py").write_text(
        textwrap.dedent(
            """\
            import sys, time
            from pathlib import Path
            from datasets import load_dataset

            def keep(ex, idx):
                slow = sys.argv[2] != "-"  # the run to kill; the rerun goes at full speed
                if slow and idx == 3000:
                    Path(sys.argv[2]).write_text("busy")
                time.sleep(0.002 if slow and idx >= 3000 else 0)
                return idx % 3 != 0

            ds = load_dataset("csv", data_files=sys.argv[1], split="train")
            ds = ds.filter(keep, with_indices=True, writer_batch_size=100)
            print("finished")
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20_000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    _run_and_kill(tmp_path, env)
    (partial,) = (tmp_path / "cache").rglob("tmp*")
    assert read_summary(partial).fingerprint and read_summary(partial).rows  # what made it look resumable
    (entry,) = [
        e for e in json.loads(invoke("ls", "--json", env=env).stdout)["entries"] if e["kind"] == "temp"
    ]
    assert entry["resumable"] is False, entry
    killed_doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    killed = killed_doc["run"]
    assert [f["resumable_rows"] for f in killed_doc["interrupted"]["written"]] == [0]
    told = " ".join(invoke("explain", "--last", env=env, columns=200).stdout.split())
    assert "unfinished; datasets does not reuse these" in told and "partial output" not in told, told
    # The rerun computes it all; explain says the killed run began it, not "first time this step ran".
    cachetool_run("p.py", "d.csv", "-", env=env, cwd=tmp_path, warm=True)
    doc = json.loads(invoke("explain", "--last", "--json", env=env).stdout)
    (step,) = [s for s in doc["steps"] if s["operation"] == "filter"]
    assert [r["kind"] for r in step["reasons"]] == ["killed-before"], step["reasons"]
    assert f"its last attempt, in run {killed}" in step["reasons"][0]["message"]
    hours_ago = time.time() - 2 * 3600
    os.utime(partial, (hours_ago, hours_ago))
    assert _gc_plan(env, "--temp") == ([str(partial)], {})


BOTH_WORKERS = textwrap.dedent(
    """\
    import os, sys, time
    from pathlib import Path
    from datasets import load_dataset

    def f(ex, idx):
        time.sleep(0.01)  # every worker as slow, all along
        if idx[-1] >= int(os.environ.get("KILL_AT", 10**9)):
            Path(sys.argv[2]).write_text("busy")
        return {"y": [x * 2 + i for x, i in zip(ex["x"], idx)]}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    ds = ds.map(f, with_indices=True, batched=True, batch_size=100, num_proc=4)
    print("finished", ds._fingerprint)
    """
)


@pytest.mark.parametrize(("kill_at", "resumes"), [(16_000, False), (19_500, True)], ids=["early", "late"])
def test_a_num_proc_map_resumes_unless_that_is_much_slower(
    tmp_path: Path,
    kill_at: int,
    resumes: bool,
    shared: Shared,
) -> None:
    """A `num_proc=4` map whose workers are SIGKILLed together: resumed, their rests are computed
    one after the other in the rerun's process, so killed at about 20% each (16,000 rows left one
    after the other against 5,000 side by side) the rerun leaves it to `datasets`' workers, and at
    about 90% it resumes; either way the files are an uninterrupted run's."""
    folder, reference = shared(BOTH_WORKERS, 20_000)
    assert reference.finished(timeout=240), reference.why()
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    _kill_group(folder, {**env, "KILL_AT": str(kill_at)})
    partials = list((tmp_path / "cache").rglob("tmp*"))
    assert partials  # (on a loaded machine a worker may have finished, or not begun, by then)

    out = cachetool_run("p.py", "d.csv", "-", env=env, cwd=folder, warm=True)
    said = invoke("explain", "--last", env=env, columns=200).stdout
    assert ("resumed:" in said) == resumes, said
    fp = out.stdout.split()[-1]
    mine = sorted((tmp_path / "cache").rglob(f"cache-{fp}*.arrow"))
    theirs = sorted((folder / "reference").rglob(f"cache-{fp}*.arrow"))
    assert [p.name for p in mine] == [p.name for p in theirs] and len(mine) == 4
    assert all(_table(m).equals(_table(t)) for m, t in zip(mine, theirs, strict=True))


# A batched `num_proc=2` map whose every batch of 500 takes 0.1 s: each worker's 10,000 rows take 2 s,
# side by side. Each worker stops in its last batch (rows 9,500 on of its shard) once KILL_AT is set.
TIMED = textwrap.dedent(
    """\
    import os, sys, time
    from pathlib import Path
    from datasets import load_dataset

    def f(ex, idx):
        if 0 <= int(os.environ.get("KILL_AT", -1)) <= idx[-1] % 10_000:
            Path(sys.argv[2]).write_text("busy")
            time.sleep(60)
        time.sleep(0.1)
        return {"y": [x * 2 for x in ex["x"]]}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    ds = ds.map(f, with_indices=True, batched=True, batch_size=500, num_proc=2)
    print("finished", ds._fingerprint)
    """
)


def test_stats_gives_back_the_time_the_killed_run_spent_on_the_rows_reused(tmp_path: Path) -> None:
    """A `num_proc=2` batched map SIGKILLed in each worker's last batch, resumed by a rerun under
    `cachetool run`: `stats` gives back the rows reused (about 9,000 written by each worker) and
    the time the killed run spent computing them: at least what the busier worker slept through
    them (0.1 s a batch), at most the killed step's own time until the kill (its two workers ran
    side by side). It said 10 s for 18,000 rows: the rerun's time for its last 2,000 rows (the
    rests of both shards one after the other, a batch of each checked again, the set-up) scaled
    up to 18,000 rows."""
    (tmp_path / "p.py").write_text(TIMED, encoding="utf-8")
    (tmp_path / "d.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(20_000)), encoding="utf-8")
    env = subprocess_env(tmp_path, HF_DATASETS_CACHE=str(tmp_path / "cache"))
    _kill_group(tmp_path, {**env, "KILL_AT": "9500"})
    killed_by = time.time()
    started = json.loads(invoke("explain", "--last", "--json", env=env).stdout)["interrupted"]["step"]["time"]
    # Each worker's rows in whole batches of 500 (one may be a batch behind the other when killed).
    rows = [(read_summary(p).rows or 0) // 500 * 500 for p in (tmp_path / "cache").rglob("tmp*")]
    assert len(rows) == 2 and min(rows) >= 5000, rows

    cachetool_run("p.py", "d.csv", "-", env=env, cwd=tmp_path, warm=True)
    back = json.loads(invoke("stats", "--json", env=env).stdout)["given_back"]["resume"]
    assert (back["steps"], back["rows"]) == (1, sum(rows)), (back, rows)
    # 0.1 s a batch of 500 rows: the worker that wrote the most slept longest.
    assert max(rows) / 5000 <= back["seconds"] <= killed_by - started, (back, rows, killed_by - started)
