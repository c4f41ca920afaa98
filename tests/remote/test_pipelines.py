"""The remote tier with real `datasets` pipelines and real processes: a result pushed from one
cache root is a cache hit in another; `cachetool run --remote` computes on the second root no
step the first one computed; a push killed by SIGKILL half-way leaves nothing a reader uses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import cachetool_run, hf_env, invoke
from tests.remote.conftest import Bucket
from tests.remote.test_remote import cache_file

PIPELINE = """
import json, os, sys
from datasets import load_dataset

ds = load_dataset("csv", data_files=sys.argv[1], split="train")
if sys.argv[2:] == ["--load-only"]:
    sys.exit(0)

def double(batch):
    with open(os.environ["MARKER"], "a") as f:
        f.write("double\\n")
    return {"y": [v * 2 for v in batch["id"]]}

out = ds.map(double, batched=True)
even = out.filter(lambda x: x["id"] % 2 == 0)
files = [f["filename"] for f in (*out.cache_files, *even.cache_files)]
if os.environ.get("NUM_PROC"):  # a num_proc map: its result is shards
    def triple(batch):
        with open(os.environ["MARKER"], "a") as f:
            f.write("triple\\n")
        return {"z": [v * 3 for v in batch["y"]]}

    tripled = even.map(triple, batched=True, num_proc=2)
    files += [f["filename"] for f in tripled.cache_files]
print(json.dumps({"map": out._fingerprint, "filter": even._fingerprint, "files": files}))
"""


def _run(
    tmp_path: Path, host: str, *remote: str, load_only: bool = False
) -> tuple[dict[str, object], str, str]:
    """Run the pipeline on `host`'s own cache root (the data file is the same for every host):
    (what it printed, what its function wrote, stderr); `load_only`: only load the source."""
    import json

    data = tmp_path / "data.csv"
    if not data.exists():
        data.write_text("id,text\n" + "".join(f"{i},row {i}\n" for i in range(200)))
        (tmp_path / "pipeline.py").write_text(PIPELINE)
    base = tmp_path / host
    base.mkdir(exist_ok=True)
    env = hf_env(
        base, MARKER=str(base / "marker"), **{k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    )
    args = ("--load-only",) if load_only else ()
    proc = cachetool_run(
        *remote, "pipeline.py", str(data), *args, env=env, cwd=tmp_path, timeout=180, warm=True
    )
    if load_only:
        return {}, "", proc.stderr
    marker = base / "marker"
    return (
        json.loads(proc.stdout.splitlines()[-1]),
        marker.read_text() if marker.exists() else "",
        proc.stderr,
    )


def _table(path: str | os.PathLike[str]) -> pa.Table:
    with pa.OSFile(os.fspath(path), "rb") as f:
        return pa.ipc.open_stream(f).read_all()


@pytest.mark.slow
def test_a_pulled_result_is_a_datasets_cache_hit(
    moto_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Push two steps from host A, pull them into host B's cache (where the source is loaded:
    `datasets` replaces a source's folder when it prepares it): B's run of the same pipeline
    computes neither (its function never runs) and reads equal tables."""
    for k, v in moto_bucket.server.env().items():
        monkeypatch.setenv(k, v)
    a, ran_a, _ = _run(tmp_path, "a")
    assert ran_a
    pushed = invoke(
        "remote",
        "push",
        str(a["map"]),
        str(a["filter"]),
        "--cache-dir",
        str(tmp_path / "a" / "cache"),
        "--remote",
        moto_bucket.url,
    )
    assert pushed.exit_code == 0, pushed.output
    _run(tmp_path, "b", load_only=True)
    for fp in (a["map"], a["filter"]):
        got = invoke(
            "remote",
            "pull",
            str(fp),
            "--cache-dir",
            str(tmp_path / "b" / "cache"),
            "--remote",
            moto_bucket.url,
        )
        assert got.exit_code == 0 and got.stdout.startswith(f"Pulled {fp}: "), got.output
    b, ran_b, _ = _run(tmp_path, "b")
    assert ran_b == "" and (b["map"], b["filter"]) == (a["map"], a["filter"])
    for fa, fb in zip(a["files"], b["files"], strict=True):  # type: ignore[call-overload]
        assert fb.startswith(str(tmp_path / "b")) and _table(fa).equals(_table(fb))


@pytest.mark.slow
def test_run_with_a_remote_computes_nothing_another_host_computed(bucket: Bucket, tmp_path: Path) -> None:
    """`cachetool run --remote URL` on host A computes and pushes every step; the same pipeline
    on host B, with an empty cache, computes none of them (a num_proc map's shards included):
    each is pulled, checked and loaded as a cache hit, byte for byte the same; `cachetool stats`
    on B counts what the remote served, and `explain --last` there does not claim that every
    step ran."""
    os.environ.update(bucket.server.env(), NUM_PROC="2")
    try:
        a, ran_a, _ = _run(tmp_path, "a", "--remote", bucket.url)
        assert ran_a.count("triple") == 2 and f"{a['map']}/record.json" in bucket.objects()
        assert f"{a['filter']}/record.json" in bucket.objects()
        b, ran_b, err = _run(tmp_path, "b", "--remote", bucket.url)
    finally:
        for k in [*bucket.server.env(), "NUM_PROC"]:
            os.environ.pop(k, None)
    assert ran_b == "", err
    shards = [f for f in b["files"] if "_of_00002" in f]  # type: ignore[attr-defined]
    assert len(shards) == 2, b["files"]
    assert f"cachetool: {a['map']} from {bucket.url} (" in err
    for fa, fb in zip(a["files"], b["files"], strict=True):  # type: ignore[call-overload]
        assert Path(fa).read_bytes() == Path(fb).read_bytes()
    stats = invoke("stats", "--cache-dir", str(tmp_path / "b" / "cache"), "--json")
    (served,) = json.loads(stats.stdout)["remote_served"]
    sizes = sum(Path(f).stat().st_size for f in {*b["files"]})  # type: ignore[misc]
    assert (served["results"], served["bytes"]) == (3, sizes)
    human = invoke("stats", "--cache-dir", str(tmp_path / "b" / "cache")).stdout
    assert "Served from the remote: 3 results, " in human
    explained = invoke("explain", "--last", "--cache-dir", str(tmp_path / "b" / "cache")).stdout
    assert "1 step computed, 3 loaded from the cache" in explained, explained
    assert "every step ran" not in explained, explained


@pytest.mark.slow
def test_a_push_killed_half_way_leaves_nothing_a_reader_uses(
    moto_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL a `cachetool remote push` of 8 shards after its first object lands: no record is
    on the remote, so a pull says the result is not there (exit 2) and uses none of its files;
    the next push completes it and a pull then gets every byte."""
    fp, folder = "fedcba9876543210", tmp_path / "a" / "cache" / "csv" / "x"
    for rank in range(8):
        cache_file(
            folder / f"cache-{fp}_{rank:05d}_of_00008.arrow", f"{fp}_{rank:05d}_of_00008", rows=300_000
        )
    env = {**os.environ, **moto_bucket.env(), "PYTHONPATH": str(Path(__file__).parents[2])}
    cmd = [
        sys.executable,
        "-m",
        "cachetool",
        "remote",
        "push",
        fp,
        "--cache-dir",
        str(tmp_path / "a" / "cache"),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not moto_bucket.objects() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    landed = moto_bucket.objects()
    assert landed and f"{fp}/record.json" not in landed, landed
    for k, v in moto_bucket.env().items():
        monkeypatch.setenv(k, v)
    (tmp_path / "b").mkdir()
    missing = invoke("remote", "pull", fp, "--cache-dir", str(tmp_path / "b"))
    assert missing.exit_code == 2 and "is not on the remote" in missing.stderr
    assert os.listdir(tmp_path / "b") == []
    again = invoke("remote", "push", fp, "--cache-dir", str(tmp_path / "a" / "cache"))
    assert again.exit_code == 0, again.output
    got = invoke("remote", "pull", fp, "--cache-dir", str(tmp_path / "b"))
    assert got.exit_code == 0, got.output
    for name in os.listdir(folder):
        assert (tmp_path / "b" / "csv" / "x" / name).read_bytes() == (folder / name).read_bytes()


@pytest.mark.slow
def test_a_run_refuses_a_tampered_remote_result_and_computes_the_step(
    moto_bucket: Bucket, tmp_path: Path
) -> None:
    """With a remote whose copy of a step is tampered with (its record names other bytes), a
    traced run on another host says why on stderr, places nothing, and computes the step: the
    result is the one host A computed."""
    os.environ.update(moto_bucket.server.env())
    try:
        a, _, _ = _run(tmp_path, "a", "--remote", moto_bucket.url)
        fp = str(a["map"])
        tampered = Bucket(moto_bucket.server, moto_bucket.prefix + "-tampered")
        good = moto_bucket.get(f"{fp}/cache-{fp}.arrow")
        n = len(good) // 2
        tampered.put(f"{fp}/cache-{fp}.arrow", good[:n] + bytes([good[n] ^ 1]) + good[n + 1 :])
        tampered.put(f"{fp}/record.json", moto_bucket.get(f"{fp}/record.json"))
        b, ran_b, err = _run(tmp_path, "b", "--remote", tampered.url)
    finally:
        for k in moto_bucket.server.env():
            os.environ.pop(k, None)
    assert ran_b == "double\n", err  # computed here
    assert (
        f"cachetool: {tampered.url}/{fp}/cache-{fp}.arrow: its xxh3 is not the one its record names: "
        "not used; the step computes here" in err
    )
    assert Path(str(b["files"][0])).read_bytes() == good  # type: ignore[index]
