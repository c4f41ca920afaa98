"""One preparation per shared cache: `cachetool run --once` and `cachetool.prepare_once()`.

Real ranks: processes started together on one cache folder (they wait for a file, then run
`tests/once_pipeline.py`); a leader killed by SIGKILL in the middle of its map. The lease rules
themselves (a live lease waited for, an expired one taken over, exactly one taker) are checked
in this process without `datasets`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cachetool.cache.layout import LEDGER_DIR
from cachetool.cache.lease import read_lease
from cachetool.processes import this_host
from cachetool.trace.leases import claim_step, drop_step
from cachetool.trace.once import once_dir, result_present, take_turn
from tests import forks
from tests.conftest import hf_env

PIPELINE = Path(__file__).with_name("once_pipeline.py")
#: Lines a user function writes when its step computes: the map (batches of 10) over train (20
#: rows) and test (10 rows), the filter once per split, the num_proc map once per shard.
ONE_COMPUTATION = {"map": 3, "filter": 2, "num_proc": 2}


def _work(base: Path) -> Path:
    work = base / "work"
    work.mkdir()
    (work / "train.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(1, 21)))
    (work / "test.csv").write_text("x\n" + "".join(f"{i}\n" for i in range(21, 31)))
    return work


Rank = subprocess.Popen[bytes] | forks.ForkedProcess


def _start(base: Path, work: Path, ranks: int, *, once: bool) -> list[Rank]:
    """`ranks` processes of the pipeline on one cache; under `once`, every other one runs it inside
    `cachetool.prepare_once()` (`python once_pipeline.py`), the rest under `cachetool run --once`;
    without, every one under `cachetool run`. Every other rank is a fresh interpreter, the rest are
    forked warm (`forks.PIPELINE`): those share a hash seed, the fresh ones each have their own,
    so ranks under different seeds still meet on every step."""
    env = hf_env(base)
    procs: list[Rank] = []
    for i in range(ranks):
        out = str(base / f"out-{i}.json")
        if once and i % 2:
            cmd = [sys.executable, str(PIPELINE), str(work), out, "--api"]
        else:
            cmd = [*forks.CLI, "run", *(["--once"] * once), str(PIPELINE), str(work), out]
        with open(base / f"err-{i}.txt", "wb") as err:
            if i % 2 == 0 and forks.available():
                procs.append(
                    forks.ForkedProcess(
                        cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, preload=forks.PIPELINE
                    )
                )
            else:
                procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err))
    return procs


def _wait(base: Path, procs: list[Rank], skip: int | None = None) -> None:
    for i, proc in enumerate(procs):
        code = proc.wait(timeout=300)
        if proc.pid != skip:
            assert code == 0, (base / f"err-{i}.txt").read_text()[-3000:]


def _counts(work: Path) -> dict[str, list[tuple[int, int]]]:
    """Per step, (pid, first value of the batch) of each call of its function."""
    out = {}
    for step in ONE_COMPUTATION:
        path = work / f"count-{step}"
        lines = path.read_text().splitlines() if path.exists() else []
        out[step] = [(int(pid), int(first)) for pid, first in (line.split() for line in lines)]
    return out


def _computations(counts: dict[str, list[tuple[int, int]]]) -> dict[str, int]:
    """How many times each step computed each split: the calls of a batch that only starts a
    computation (the map's first batch of train, x=1, and of test, x=21; the filter's per split;
    the num_proc map's first shard, y=4)."""
    starts = {"map": {1: "train", 21: "test"}, "filter": {2: "train", 42: "test"}, "num_proc": {4: "train"}}
    out: dict[str, int] = {}
    for step, calls in counts.items():
        for _, first in calls:
            if first in starts[step]:
                key = f"{step} {starts[step][first]}"
                out[key] = out.get(key, 0) + 1
    return out


def _outputs(base: Path, procs: list[Rank], skip: int | None = None) -> set[str]:
    return {(base / f"out-{i}.json").read_text() for i, p in enumerate(procs) if p.pid != skip}


def _rows(output: str) -> list[list[tuple[int, ...]]]:
    """The rows of a pipeline's result, in order of `x` (the train split is shuffled)."""
    train, test = json.loads(output)["rows"]
    return [
        sorted(zip(train["x"], train["y"], train["z"], strict=True)),
        sorted(zip(test["x"], test["y"], strict=True)),
    ]


EXPECTED_ROWS = [
    [(x, 2 * x, 2 * x + 1) for x in range(2, 21, 2)],
    [(x, 2 * x) for x in range(22, 31, 2)],
]


def _stats(base: Path, root: Path | None = None) -> dict:
    proc = forks.run(
        [*forks.CLI, "stats", "--json", "--cache-dir", str(root or base / "cache")],
        env=hf_env(base),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_eight_ranks_under_once_compute_each_step_once(tmp_path: Path) -> None:
    """8 processes run one pipeline together on one cache, half under `cachetool run --once`, half
    inside `cachetool.prepare_once()`: the function of every step runs exactly once (a
    DatasetDict map and filter: once per split; a num_proc map: once per shard), all 8 end with
    the same data, `stats` reports no miss storm, and no step lease is left behind."""
    work = _work(tmp_path)
    procs = _start(tmp_path, work, 8, once=True)
    (work / "go").touch()
    _wait(tmp_path, procs)
    counts = _counts(work)
    assert {step: len(calls) for step, calls in counts.items()} == ONE_COMPUTATION, counts
    assert set(_computations(counts).values()) == {1}
    (output,) = _outputs(tmp_path, procs)
    assert _rows(output) == EXPECTED_ROWS
    assert _stats(tmp_path)["concurrent"]["count"] == 0
    assert os.listdir(once_dir(tmp_path / "cache")) == []


@pytest.mark.slow
def test_without_once_every_step_computed_twice_at_once_is_a_reported_miss_storm(tmp_path: Path) -> None:
    """The same pipeline in 4 ranks without `--once` may compute a step several times at once
    (whether they do depends on timing); every computation more than one is in
    `stats`' miss storms, and all 4 still end with the same data."""
    work = _work(tmp_path)
    procs = _start(tmp_path, work, 4, once=False)
    (work / "go").touch()
    _wait(tmp_path, procs)
    counts = _counts(work)
    computations = _computations(counts)
    assert len(computations) == 5  # every step, every split
    # A rank may compute one shard of the num_proc map and load the other (finished by another
    # rank): each rank whose workers ran is one computation.
    computations["num_proc train"] = len({rank for rank, _ in counts["num_proc"]})
    storms = [
        c for c in _stats(tmp_path)["concurrent"]["computations"] if c["operation"] in ("map", "filter")
    ]
    # A rank computes a step only when no other had finished it: every computation more than one
    # overlaps another, and stats reports it; a rank that found the file missing when the step
    # began and another's file in place when `datasets` looked loaded it, and is not reported.
    # (Nothing else is reported: test_a_rank_that_loads_the_file_another_renamed_into_place_…
    # proves it exactly; here a num_proc rank that computed one shard and loaded the other is
    # counted from its workers' calls, which a loaded machine can blur, so: at least.)
    reported = sum(len(c["computations"]) - 1 for c in storms)
    assert reported >= sum(n - 1 for n in computations.values()), (storms, computations)
    assert all(c["runs"] == len(c["computations"]) > 1 for c in storms)
    (output,) = _outputs(tmp_path, procs)
    assert _rows(output) == EXPECTED_ROWS


@pytest.mark.slow
def test_a_leader_killed_in_its_map_is_taken_over_by_exactly_one_survivor(tmp_path: Path) -> None:
    """3 ranks under `--once`; the one computing the map is SIGKILLed half-way (its unfinished
    `tmp*` file stays in the cache folder): the two others finish, the map is computed again by
    exactly one of them, both end with the right data (nothing of the dead leader's file is
    used), and no step lease is left."""
    work = _work(tmp_path)
    (work / "block").touch()
    procs = _start(tmp_path, work, 3, once=True)
    (work / "go").touch()
    started = work / "started"
    deadline = time.monotonic() + 120
    while not started.exists() or not started.read_text():
        assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
        assert time.monotonic() < deadline, "no rank got into the map"
        time.sleep(0.02)
    leader = int(started.read_text())
    os.kill(leader, signal.SIGKILL)
    (work / "release").touch()
    _wait(tmp_path, procs, skip=leader)
    counts = _counts(work)
    assert [first for pid, first in counts["map"] if pid == leader] == [1, 11]  # killed in its 2nd batch
    survivors = {step: [c for c in calls if c[0] != leader] for step, calls in counts.items()}
    assert {step: len(calls) for step, calls in survivors.items()} == ONE_COMPUTATION, counts
    assert set(_computations(survivors).values()) == {1}
    outputs = _outputs(tmp_path, procs, skip=leader)
    assert len(outputs) == 1 and _rows(outputs.pop()) == EXPECTED_ROWS
    leftovers = [p for p in (tmp_path / "cache").rglob("tmp*") if p.is_file()]
    assert leftovers, "the killed leader's unfinished file"
    assert os.listdir(once_dir(tmp_path / "cache")) == []


#: One rank's map of `cache_file_name=OUT`, its function counted in WORK/count-map. Under ROLE=late
#: the fingerprint's hashing (before `datasets` looks for the file) says so in WORK/late-started
#: and waits for WORK/early-done: the other rank then computes and renames its file into place.
LATE_RANK = """
import os, sys, time
from pathlib import Path
from datasets import Dataset

work = Path(sys.argv[1])

class Gate:
    def __reduce__(self):
        if os.environ.get("ROLE") == "late" and not (work / "early-done").exists():
            (work / "late-started").touch()
            while not (work / "early-done").exists():
                time.sleep(0.01)
        return (Gate, ())

def double(batch, gate):
    with open(work / "count-map", "a") as f:
        f.write(f"{os.getpid()} {batch['x'][0]}\\n")
    return {"y": [x * 2 for x in batch["x"]]}

ds = Dataset.from_dict({"x": list(range(10))})
ds = ds.map(double, batched=True, fn_kwargs={"gate": Gate()}, cache_file_name=str(work / "out.arrow"))
ds.select(range(5))  # a step of the late rank after the other's: `explain --last` is about its run
"""


@pytest.mark.slow
def test_a_rank_that_loads_the_file_another_renamed_into_place_meanwhile_is_a_hit(tmp_path: Path) -> None:
    """A rank starts a map while its file is missing; before `datasets` looks, another rank
    computes it and renames its file into place: the first loads it (its function never runs),
    so its record says it loaded, `stats` reports no miss storm, `explain --last` says loaded."""
    work = tmp_path / "work"
    work.mkdir()
    script = work / "rank.py"
    script.write_text(LATE_RANK)
    env = hf_env(tmp_path)
    cmd = [*forks.CLI, "run", str(script), str(work)]
    late = subprocess.Popen(cmd, env={**env, "ROLE": "late"}, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (work / "late-started").exists():
        assert late.poll() is None and time.monotonic() < deadline, late.stderr and late.stderr.read()
        time.sleep(0.02)
    early = forks.run(cmd, env=env, capture_output=True, text=True)
    assert early.returncode == 0, early.stderr
    (work / "early-done").touch()
    _, err = late.communicate(timeout=120)
    assert late.returncode == 0, err
    calls = _counts(work)["map"]
    assert len(calls) == 1  # one batch: only the early rank computed
    assert _stats(tmp_path, work)["concurrent"]["count"] == 0  # the folder of the file keeps its records
    explained = forks.run(
        [*forks.CLI, "explain", "--last", "--cache-dir", str(work)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert explained.returncode == 0, explained.stderr
    assert "0 steps computed, 1 loaded" in " ".join(explained.stdout.split()), explained.stdout


# The lease rules, in this process.


def _lease_doc(**changes: object) -> bytes:
    me = this_host()
    doc = {"v": 1, "host": "node-7", "boot_id": "another-boot", "pid": 4242, "pid_ns": me.pid_ns}
    doc |= {"start": time.time() - 100, "renewed": time.time(), "lifetime": 60, "fingerprint": "ab" * 8}
    return json.dumps(doc | changes).encode()


def _root(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "cache"
    (root / "csv").mkdir(parents=True)
    return root, str(root / "csv" / f"cache-{'ab' * 8}.arrow")


def test_a_live_lease_of_another_host_is_waited_for_until_the_result_is_there(tmp_path: Path) -> None:
    """A step whose lease another host renews is waited for (short pauses), and this process
    takes no lease: once the result is in place it goes on to load it."""
    root, path = _root(tmp_path)
    once_dir(root).mkdir(parents=True)
    (once_dir(root) / f"{'ab' * 8}.0.json").write_bytes(_lease_doc())
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 5:
            Path(path).write_bytes(b"done")

    assert take_turn(path, root, sleep=sleep) is None
    assert len(pauses) == 5 and max(pauses) <= 0.5
    assert sorted(os.listdir(once_dir(root))) == [f"{'ab' * 8}.0.json"]
    assert take_turn(path, root, may_wait=False) is None  # present: no lease taken


def test_an_expired_or_dead_lease_is_taken_over_by_the_next_generation(tmp_path: Path) -> None:
    """Another host's lease not renewed within its lifetime, or one of this host whose process
    is gone, is over: the step's next lease (generation n + 1) is taken, the old one removed;
    giving it back leaves nothing. Without a result, a process that may not wait computes
    without a lease when a live one is held."""
    root, path = _root(tmp_path)
    folder = once_dir(root)
    folder.mkdir(parents=True)
    fp = "ab" * 8
    expired = folder / f"{fp}.3.json"
    expired.write_bytes(_lease_doc(renewed=time.time() - 61))
    os.utime(expired, (time.time() - 61, time.time() - 61))  # a renewal is the later of the two
    taken = take_turn(path, root, sleep=lambda s: pytest.fail("waited for an expired lease"))
    assert taken == folder / f"{fp}.4.json" and os.listdir(folder) == [f"{fp}.4.json"]
    lease = read_lease(taken)
    assert lease is not None and lease.pid == os.getpid()
    drop_step(taken)
    me = this_host()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    gone = _lease_doc(host=me.host, boot_id=me.boot_id, pid=int(dead.stdout), renewed=time.time())
    (folder / f"{fp}.0.json").write_bytes(gone)
    taken = take_turn(path, root, sleep=lambda s: pytest.fail("waited for a dead process"))
    assert taken == folder / f"{fp}.1.json"
    assert take_turn(path, root, may_wait=False) is None  # held by this live process: not waited for
    drop_step(taken)
    assert os.listdir(folder) == []


def test_of_many_takers_of_one_lease_exactly_one_wins(tmp_path: Path) -> None:
    """16 threads claiming one step lease at once: exactly one gets it."""
    root, _ = _root(tmp_path)
    path = once_dir(root) / "cd.0.json"
    barrier = threading.Barrier(16)
    wins: list[bool] = []

    def claim() -> None:
        barrier.wait()
        wins.append(claim_step(path, "cd"))

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 15 + [True]
    drop_step(path)
    assert not path.exists() and (root / LEDGER_DIR / "once").is_dir()


def test_a_result_is_there_once_its_file_or_a_whole_set_of_shards_is(tmp_path: Path) -> None:
    """`datasets` renames each file into place when written: the step's file, or every shard of
    one num_proc count, means the result is there; a partial set of shards does not."""
    folder = tmp_path / "d"
    folder.mkdir()
    path = str(folder / "cache-0123456789abcdef.arrow")
    assert not result_present(path)
    (folder / "cache-0123456789abcdef_00000_of_00002.arrow").touch()
    (folder / "tmpab12cd34").touch()
    assert not result_present(path)
    (folder / "cache-0123456789abcdef_00001_of_00002.arrow").touch()
    assert result_present(path)
