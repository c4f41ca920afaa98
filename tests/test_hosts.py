"""One cache, two hosts: a writer on this host, `cachetool gc` on "another" one.

The other host is simulated with real processes in their own PID and UTS namespaces
(`unshare --pid --uts --fork --mount-proc`, host name `node-7`): its `/proc` shows none of the
writer's processes, exactly as on a second machine of a shared file system. Only the writer's
lease (`cachetool run` holds one) can tell gc there that the writer lives.

The soak runs longer by hand: `CACHETOOL_HOSTS_SOAK=25 pytest tests/test_hosts.py -k live`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from cachetool.history.explain.explainer import explain_run
from tests import forks
from tests.conftest import build_once, copy_cache, hf_env

pytestmark = pytest.mark.slow

CACHETOOL = str(Path(sys.executable).with_name("cachetool"))
#: `cachetool` on this host, forked from the warm parent (`forks.run`).
CLI = [sys.executable, "-m", "cachetool"]

WRITER = textwrap.dedent(
    """\
    import json, os, sys, time
    from datasets import load_dataset

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    stop = sys.argv[2]

    def slow(x, r):  # 600 rows: a map takes over a second, its tmp file lives that long
        time.sleep(0.002)
        return {"v": x["id"] * r}

    n = 0
    while not os.path.exists(stop):
        n += 1
        out = ds.map(slow, fn_kwargs={"r": n}, writer_batch_size=10)
        assert sum(out["v"]) == n * sum(range(len(ds))), n
    print(json.dumps({"maps": n}))
    """
)


def _other_host(name: str = "node-7") -> list[str]:
    """The command prefix that runs a process on "another host" called `name`."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to simulate a second host")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    namespaces = ["--pid", "--uts", "--fork", "--mount-proc"]
    return ["unshare", *user, *namespaces, "sh", "-c", 'hostname "$0" && exec "$@"', name]


def on_other_host(base: Path, *args: str, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """`cachetool ARGS --json` run on node-7; its JSON document."""
    proc = subprocess.run(
        [*_other_host(), CACHETOOL, *args, "--json"],
        env=hf_env(base, COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in ok, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout))


def gc_from_other_host(base: Path, *args: str) -> dict[str, Any]:
    """`cachetool gc --temp ... --json` run on node-7."""
    return on_other_host(base, "gc", "--temp", "--tmp-dir", str(base / "tmp"), *args)


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache with the csv prepared by `datasets`, built once per session (see build_csv_cache.py)."""
    folder, _ = build_once(tmp_path_factory, "hosts_csv", "build_csv_cache.py")
    return folder


@pytest.fixture
def base(tmp_path: Path, prepared: Path) -> Path:
    """A cache root with one prepared csv dataset, and the csv (`data.csv`, a link to the one
    prepared: `datasets` keys the prepared dataset by the csv's real path, and finds it here)."""
    (tmp_path / "tmp").mkdir()
    copy_cache(prepared / "cache", tmp_path / "cache")
    (tmp_path / "data.csv").symlink_to(prepared / "data.csv")
    return tmp_path


def _csv(base: Path) -> str:
    return os.path.realpath(base / "data.csv")


def _tmp_files(base: Path) -> set[Path]:
    return {p for p in (base / "cache").rglob("tmp*") if p.is_file()}


Writer = subprocess.Popen[str] | forks.ForkedProcess


def _writer(base: Path, *, leased: bool, **env: str) -> Writer:
    """The writer run by `cachetool run` (forked warm, `forks.PIPELINE`: its output is bytes),
    which leases the cache, or by plain `python`, which does not."""
    script = base / "writer.py"
    script.write_text(WRITER)
    args = [str(script), _csv(base), str(base / "stop")]
    if leased and forks.available():
        return forks.ForkedProcess(
            [*CLI, "run", *args],
            env=hf_env(base, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preload=forks.PIPELINE,
        )
    return subprocess.Popen(
        [*([*CLI, "run"] if leased else [sys.executable]), *args],
        env=hf_env(base, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_tmp(base: Path, proc: Writer, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not _tmp_files(base):
        assert proc.poll() is None and time.time() < deadline, "the writer never wrote a tmp file"
        time.sleep(0.05)


def test_gc_on_another_host_never_removes_a_live_leased_writers_file(base: Path) -> None:
    """A `cachetool run` pipeline maps again and again on host `vm` while `gc --temp --min-age 0`
    runs on host `node-7` (whose /proc shows none of its processes): no tmp file of the writer is
    removed, every map completes, and gc says which lease kept them."""
    runs = int(os.environ.get("CACHETOOL_HOSTS_SOAK", "4"))
    proc = _writer(base, leased=True)
    removed: list[str] = []
    kept = 0  # gc runs that found a live tmp file and kept it for the lease
    try:
        _wait_for_tmp(base, proc)
        for _ in range(runs):
            doc = gc_from_other_host(base, "--min-age", "0", "-y")
            removed += [r["path"] for r in doc["result"]["removed"] if Path(r["path"]).name.startswith("tmp")]
            leases = doc["plan"]["leases"]
            assert [(lease["host"], lease["state"]) for lease in leases] == [("vm", "live")]
            tmp_kept = [s for s in doc["plan"]["skipped"] if Path(s["path"]).name.startswith("tmp")]
            for s in tmp_kept:
                assert (
                    s["reason"]
                    == f"in use by a run holding a lease (pid {proc.pid} on vm): it may be writing this"
                )
            kept += bool(tmp_kept)
            assert proc.poll() is None, proc.communicate()[1][-2000:]
        (base / "stop").touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    print(f"{runs} gc runs on node-7: {kept} kept a live tmp file for its lease, {len(removed)} removed one")
    assert removed == []
    assert kept >= max(1, runs // 2), f"only {kept} of {runs} gc runs met a live tmp file"
    assert json.loads(out.strip().splitlines()[-1])["maps"] >= 1
    assert not list((base / "cache" / ".cachetool" / "leases").glob("*.json")), "the lease outlived its run"


def test_without_a_lease_gc_on_another_host_removes_a_live_writers_file(base: Path) -> None:
    """The hazard leases exist for: the same writer run by plain `python` holds no lease, and gc
    on node-7 cannot see it; it removes the live tmp file and the writer fails."""
    proc = _writer(base, leased=False)
    removed: list[str] = []
    try:
        _wait_for_tmp(base, proc)
        for _ in range(20):
            doc = gc_from_other_host(base, "--min-age", "0", "-y")
            removed += [r["path"] for r in doc["result"]["removed"] if Path(r["path"]).name.startswith("tmp")]
            if removed or proc.poll() is not None:
                break
        (base / "stop").touch()
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert removed, "gc on the other host never removed the unleased writer's tmp file"
    assert proc.returncode != 0


#: The killed writer's lease lifetime. After the kill its lease lives at least 5/6 of it (a
#: renewal comes every sixth), 5.8 s, while `gc` and `verify` on node-7 run side by side and must
#: see it live: the pair took 0.4 to 1.84 s in runs at loads of 2 to 7 on 2 cores, so the lease
#: outlives the guarded work over 3 times. The rest of the test polls for the recorded expiry
#: rather than sleeping the lifetime out.
LEASE_SECONDS = 7.0


def test_a_killed_writers_leftovers_stay_until_its_lease_expires(base: Path) -> None:
    """A leased writer SIGKILLed mid-map leaves a tmp file and its lease. On node-7 the lease is
    live until it expires (CACHETOOL_LEASE_SECONDS, a few seconds): gc there keeps the tmp file
    and verify says a live lease may be writing it. On this host the lease is checked against
    /proc: its process is gone, so gc here would remove the file at once. Once the lease expired,
    gc on node-7 removes the tmp file and the lease, and logs both."""
    from cachetool.cache.lease import read_lease

    proc = _writer(base, leased=True, CACHETOOL_LEASE_SECONDS=str(LEASE_SECONDS))
    try:
        _wait_for_tmp(base, proc)
        time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    leftovers = _tmp_files(base)
    assert leftovers
    (lease,) = (base / "cache" / ".cachetool" / "leases").glob("*.json")

    # gc and verify on node-7 at once, while the lease lives.
    killed_at = time.time()
    verify = subprocess.Popen(
        [*_other_host(), CACHETOOL, "verify", "--json"],
        env=hf_env(base, COLUMNS="200"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        doc = gc_from_other_host(base, "--min-age", "0", "-y")
    finally:
        out, err = verify.communicate(timeout=120)
    live_until = read_lease(lease)
    assert live_until is not None
    took, left = time.time() - killed_at, live_until.expires - killed_at
    print(f"gc and verify on node-7 took {took:.2f} s of the {left:.2f} s the lease lived after the kill")
    assert took < left, "the lease expired before gc and verify on node-7 were done: raise LEASE_SECONDS"
    assert doc["result"]["removed"] == [] and doc["result"]["leases_removed"] == []
    assert [s["reason"] for s in doc["plan"]["skipped"] if Path(s["path"]) in leftovers] == [
        f"in use by a run holding a lease (pid {proc.pid} on vm): it may be writing this"
    ] * len(leftovers)
    assert _tmp_files(base) == leftovers and lease.exists()
    assert verify.returncode in (0, 1), err[-2000:]
    findings = json.loads(out)["findings"]
    assert {(f["severity"], f["problem"]) for f in findings if Path(f["path"]) in leftovers} == {
        ("info", f"may be being written by pid {proc.pid} on vm (a live lease)")
    }
    listed = on_other_host(base, "ls")["entries"]
    assert not [e for e in listed if "/.cachetool/" in e["path"]]  # leases are never entries

    here = forks.run(
        [*CLI, "gc", "--temp", "--tmp-dir", str(base / "tmp"), "--min-age", "0", "--dry-run", "--json"],
        env=hf_env(base),
        capture_output=True,
        text=True,
        check=True,
    )
    plan = json.loads(here.stdout)["plan"]
    assert {Path(i["path"]) for i in plan["items"]} >= leftovers
    assert [lease["state"] for lease in plan["leases"]] == ["dead"]

    while time.time() <= live_until.expires + 0.05:  # the lease's own record of when it expires
        time.sleep(0.05)
    doc = gc_from_other_host(base, "--min-age", "0", "-y")
    assert {Path(r["path"]) for r in doc["result"]["removed"]} >= leftovers
    assert [(r["pid"], r["host"]) for r in doc["result"]["leases_removed"]] == [(proc.pid, "vm")]
    assert not _tmp_files(base) and not lease.exists()
    logged = [
        rec
        for p in (base / "cache" / ".cachetool" / "ledger").glob("*.jsonl")
        for rec in map(json.loads, p.read_text().splitlines())
        if rec.get("type") == "gc" and rec.get("kind") == "lease"
    ]
    assert [(r["host"], r["paths"], r["reason"].split(": ")[1][:7]) for r in logged] == [
        ("node-7", [str(lease)], "expired")
    ]


def test_on_its_own_host_a_live_lease_keeps_only_what_its_process_holds(base: Path) -> None:
    """A traced process that loaded a dataset into the cache, then idles (a notebook under
    `cachetool.tracing()`), holds a live lease; on its own host that lease keeps nothing /proc
    does not show, so gc --temp still removes the leftover of another writer killed beside it. From
    node-7 the same leftover stays (the lease may be writing it)."""
    idle = base / "idle.py"
    (base / "idle.csv").write_text("x\n1\n2\n")
    idle.write_text(
        "import time, datasets\n"
        f"datasets.load_dataset('csv', data_files={str(base / 'idle.csv')!r}, split='train')\n"
        "print('ready', flush=True)\ntime.sleep(120)\n"
    )
    sleeper = subprocess.Popen(
        [CACHETOOL, "run", str(idle)], env=hf_env(base), stdout=subprocess.PIPE, text=True
    )
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline().strip() == "ready"
        proc = _writer(base, leased=False)
        try:
            _wait_for_tmp(base, proc)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        leftovers = _tmp_files(base)
        there = gc_from_other_host(base, "--min-age", "0", "--dry-run")["plan"]
        assert not {Path(i["path"]) for i in there["items"]} & leftovers
        assert [(lease["pid"], lease["state"]) for lease in there["leases"]] == [(sleeper.pid, "live")]
        here = forks.run(
            [*CLI, "gc", "--temp", "--tmp-dir", str(base / "tmp"), "--min-age", "0", "-y", "--json"],
            env=hf_env(base),
            capture_output=True,
            text=True,
            check=True,
        )
        removed = {Path(r["path"]) for r in json.loads(here.stdout)["result"]["removed"]}
        assert removed >= leftovers and not _tmp_files(base)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


PIPELINE = textwrap.dedent(
    """\
    import sys, time
    from datasets import load_dataset

    def slow(x):  # 600 rows: the map sleeps 1.5 s at least, above the 1 s the test asserts
        time.sleep(0.0025)
        return {"v": x["id"] * 2}

    ds = load_dataset("csv", data_files=sys.argv[1], split="train")
    open(sys.argv[2], "w").close()
    while len(__import__("glob").glob(sys.argv[3])) < 2:  # both hosts loaded: map at once
        time.sleep(0.01)
    print(ds.map(slow)._fingerprint)
    """
)


def _pipeline(base: Path, host: str | None, ready: str) -> Writer:
    """The pipeline under `cachetool run` on `host`, or on this host (`vm`) forked warm."""
    script = base / "pipeline.py"
    script.write_text(PIPELINE)
    args = ["run", str(script), _csv(base), str(base / ready), str(base / "ready-*")]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    if host is None and forks.available():
        return forks.ForkedProcess([*CLI, *args], env=hf_env(base), preload=forks.PIPELINE, **pipes)
    cmd = [CACHETOOL, *args] if host is None else [*_other_host(host), CACHETOOL, *args]
    return subprocess.Popen(cmd, env=hf_env(base), text=True, **pipes)


def _outputs(proc: Writer) -> tuple[str, str]:
    """Its stdout and stderr once it ended, as text."""
    out, err = proc.communicate(timeout=300)
    return (out.decode(), err.decode()) if isinstance(out, bytes) else (out, err)


def test_stats_and_lineage_tell_the_hosts_apart(base: Path) -> None:
    """The same pipeline starts on host `vm` and on `node-7` at once: both compute the same map.
    `stats` reports that both runs computed it concurrently and the time one of them lost, and
    `explain --last` of either run says so of its map (the run whose map began first said "first
    run recorded in this cache"); a later run on `node-9` loads it; `lineage` says where it was
    computed and where loaded."""
    procs = [_pipeline(base, None, "ready-a"), _pipeline(base, "node-7", "ready-b")]
    outs = [_outputs(p) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    fps = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(fps) == 1
    fp = fps.pop()
    (base / "ready-c").touch()
    third = _pipeline(base, "node-9", "ready-c")
    _, err = third.communicate(timeout=300)
    assert third.returncode == 0, err[-2000:]

    env = hf_env(base, COLUMNS="200")
    got = forks.run([*CLI, "stats", "--json"], env=env, capture_output=True, check=True)
    stats = json.loads(got.stdout)
    (dup,) = stats["concurrent"]["computations"]
    assert (dup["fingerprint"], dup["operation"], dup["runs"]) == (fp, "map", 2)
    assert dup["hosts"] == ["node-7", "vm"]
    durations = sorted(c["duration"] for c in dup["computations"])
    assert dup["lost_seconds"] == pytest.approx(durations[0]) and durations[0] > 1.0
    assert stats["concurrent"]["lost_seconds"] == pytest.approx(dup["lost_seconds"])
    assert set(stats["hosts"]) == {"vm", "node-7", "node-9"}
    human = forks.run([*CLI, "stats"], env=env, capture_output=True, text=True, check=True).stdout
    assert f"2 runs computed {fp[:8]}… concurrently (node-7, vm);" in human
    for run in (c["run"] for c in dup["computations"]):
        (step,) = [s for s in explain_run(base / "cache", run).steps if s.step.fingerprint == fp]
        assert [r.kind for r in step.reasons] == ["concurrent"], (run, step.reasons)

    lineage = forks.run([*CLI, "lineage", fp, "--json"], env=env, capture_output=True, text=True, check=True)
    steps = [s for s in json.loads(lineage.stdout)["steps"] if s["fingerprint"] == fp]
    assert steps and steps[0]["where"] in (
        "computed on vm, node-7, loaded on node-9",
        "computed on node-7, vm, loaded on node-9",
    )
    explain = forks.run([*CLI, "explain", fp, "--json"], env=env, capture_output=True, text=True, check=True)
    (why,) = json.loads(explain.stdout)["steps"]
    (reason,) = why["reasons"]
    hosts = {why["host"], why["compared_with"]["host"]}
    assert reason["kind"] == "concurrent" and hosts == {"vm", "node-7"}
    other = why["compared_with"]["host"]
    assert reason["message"].startswith(f"another run on {other} was computing the same fingerprint at")
