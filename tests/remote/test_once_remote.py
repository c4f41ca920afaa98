"""One preparation per cluster: a step's lease on the remote (`cachetool.remote.step_leases`), against a
real S3 server on 127.0.0.1 (moto; SeaweedFS in the slow lane), and two "hosts" (two processes,
each with a cache of its own) running one pipeline together under `cachetool run --once --remote`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cachetool.processes import this_host
from cachetool.remote.client import Remote, open_remote
from cachetool.remote.step_leases import RemoteLeases
from tests.conftest import hf_env
from tests.remote.conftest import Bucket
from tests.test_once import EXPECTED_ROWS, ONE_COMPUTATION, _counts, _rows, _work

FP = "0123456789abcdef"
PIPELINE = Path(__file__).parents[1] / "once_pipeline.py"


@pytest.fixture
def remote(bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> Remote:
    for k, v in bucket.server.env().items():
        monkeypatch.setenv(k, v)
    return open_remote(bucket.url)


def _leases(bucket: Bucket) -> list[str]:
    return [key for key in bucket.objects() if "/leases/" in key]


def test_of_processes_taking_one_remote_lease_exactly_one_computes(bucket: Bucket, remote: Remote) -> None:
    """8 takers of one step's lease at once (each a `RemoteLeases` of its own, as 8 hosts'
    processes): exactly one gets it; the others wait until the result is there, then take
    nothing; giving the lease back leaves no object."""
    pushed = threading.Event()
    barrier = threading.Barrier(8)
    got: list[bool] = []
    takers = [RemoteLeases(remote) for _ in range(8)]

    def take(leases: RemoteLeases) -> None:
        barrier.wait()
        won = leases.take(FP, pushed.is_set, sleep=lambda s: time.sleep(0.02))
        got.append(won)
        if won:
            assert _leases(bucket) == [f"{FP}/leases/0.0.json"]
            pushed.set()
            leases.give_back(FP)

    threads = [threading.Thread(target=take, args=(t,)) for t in takers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got) == [False] * 7 + [True]
    assert _leases(bucket) == []


def test_an_expired_remote_lease_is_taken_over_and_a_live_one_renewed(bucket: Bucket, remote: Remote) -> None:
    """A lease another host stopped renewing is over once its lifetime has passed since its
    newest object (its `last_modified`, to the second: a second more): generation 1 is taken and
    generation 0's objects removed. The holder renews by writing new objects (never replacing
    one), keeps its first, and leaves nothing when it gives the lease back."""
    me = this_host()
    doc = {"v": 1, "host": "node-7", "boot_id": "other", "pid_ns": me.pid_ns, "pid": 4242, "start": 1.0}
    bucket.put(f"{FP}/leases/0.0.json", json.dumps(doc | {"lifetime": 1.0}).encode())
    leases = RemoteLeases(remote, lifetime=0.3)
    waited: list[float] = []
    assert leases.take(FP, lambda: False, sleep=lambda s: (waited.append(s), time.sleep(s))) is True
    assert waited, "the lease was live at first"
    time.sleep(0.4)  # renewals every 0.05 s
    objects = _leases(bucket)
    assert f"{FP}/leases/1.0.json" in objects and not any("/0." in k for k in objects)
    # Its first, and its newest renewal (with the one before while a renewal is under way).
    assert 2 <= len(objects) <= 3 and objects[-1] != f"{FP}/leases/1.1.json", objects
    start = time.monotonic()
    # Live for a second, three times its lifetime, by its renewals: waited for, not taken over.
    assert RemoteLeases(remote).take(FP, lambda: time.monotonic() - start > 1.0) is False
    leases.give_back(FP)
    time.sleep(0.1)
    assert _leases(bucket) == []


@pytest.mark.slow
def test_two_hosts_with_caches_of_their_own_compute_each_step_once(
    moto_bucket: Bucket, tmp_path: Path
) -> None:
    """Two hosts, each with a cache of its own, run one pipeline together under `cachetool run
    --once --remote`: every step (each split of a DatasetDict map and filter, a num_proc map) is
    computed by one of them and pulled by the other; both end with the same data, and no lease
    is left on the remote."""
    work = _work(tmp_path)
    procs = []
    for host in ("a", "b"):
        env = hf_env(tmp_path / host, **moto_bucket.env())
        cmd = [sys.executable, "-m", "cachetool", "run", "--once", str(PIPELINE), str(work)]
        with open(tmp_path / f"err-{host}.txt", "wb") as err:
            procs.append(subprocess.Popen([*cmd, str(tmp_path / f"out-{host}.json")], env=env, stderr=err))
    (work / "go").touch()
    for host, proc in zip("ab", procs, strict=True):
        assert proc.wait(timeout=300) == 0, (tmp_path / f"err-{host}.txt").read_text()[-3000:]
    counts = _counts(work)
    assert {step: len(calls) for step, calls in counts.items()} == ONE_COMPUTATION, counts
    outputs = {(tmp_path / f"out-{host}.json").read_text() for host in "ab"}
    assert len(outputs) == 1 and _rows(outputs.pop()) == EXPECTED_ROWS
    assert _leases(moto_bucket) == []
