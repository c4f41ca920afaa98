"""`tf.data` file caches, written by real TensorFlow, read by cachetool without TensorFlow."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cachetool.cache.tfdata import TfIndexError, find_tf_caches, parse_index, read_index, tf_leftover_name
from cachetool.maintenance.liveness import scan_in_use

pytestmark = pytest.mark.slow

WRITER = textwrap.dedent(
    """\
    import os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf

    prefix, n, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

    def rows():
        for i in range(n):
            if pause and i == 5:
                print("writing", flush=True)
            if pause:
                time.sleep(pause)
            yield i, f"row {i} " * 10

    spec = (tf.TensorSpec((), tf.int64), tf.TensorSpec((), tf.string))
    for _ in tf.data.Dataset.from_generator(rows, output_signature=spec).cache(prefix):
        pass
    """
)


#: Writes one finished cache per line it reads (`prefix n`), printing a JSON line with what the
#: write raised: the runs that are not killed share one TensorFlow process (each start costs ~3 s).
WRITES = textwrap.dedent(
    """\
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf

    spec = (tf.TensorSpec((), tf.int64), tf.TensorSpec((), tf.string))
    for line in sys.stdin:
        prefix, n = line.split()

        def rows(n=int(n)):
            for i in range(n):
                yield i, f"row {i} " * 10

        try:
            for _ in tf.data.Dataset.from_generator(rows, output_signature=spec).cache(prefix):
                pass
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        print(json.dumps({"error": error}), flush=True)
    """
)


@pytest.fixture(scope="module")
def tf_writes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Path, int], str | None]]:
    """`write(prefix, n)`: a finished cache of `n` rows written by TensorFlow at `prefix` (each call
    a new tf.data pipeline, as a new run makes), returning the error it raised, if any."""
    procs: list[subprocess.Popen[str]] = []

    def write(prefix: Path, n: int) -> str | None:
        if not procs:
            tmp = tmp_path_factory.mktemp("tf-writes")
            script = tmp / "writes.py"
            script.write_text(WRITES)
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env={**os.environ, "KERAS_HOME": str(tmp / "keras")},
                )
            )
        proc = procs[0]
        assert proc.stdin is not None and proc.stdout is not None
        prefix.parent.mkdir(parents=True, exist_ok=True)
        proc.stdin.write(f"{prefix} {n}\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line, f"the TensorFlow writer exited {proc.wait()}"
        error: str | None = json.loads(line)["error"]
        return error

    yield write
    for proc in procs:
        proc.kill()
        proc.wait()


def _writer(tmp: Path, prefix: Path, n: int, pause: float) -> subprocess.Popen[str]:
    script = tmp / "writer.py"
    script.write_text(WRITER)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, str(script), str(prefix), str(n), str(pause)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KERAS_HOME": str(tmp / "keras")},  # keras writes keras.json there on import
    )


def _holders(folder: Path):  # type: ignore[no-untyped-def]
    snapshot = scan_in_use()
    return lambda name: tuple(sorted(snapshot.pids_for_path(os.path.realpath(folder / name))))


def test_a_finished_cache_is_one_complete_entry_whose_index_names_its_data(
    tmp_path: Path, tf_writes: Callable[[Path, int], str | None]
) -> None:
    """A finished cache is `<prefix>.index` plus `<prefix>.data-00000-of-00001`; the index decodes
    to 1 data shard holding 2 tensors per row, ending exactly at the data file's size."""
    folder = tmp_path / "tfcache"
    assert tf_writes(folder / "train", 300) is None
    names = sorted(os.listdir(folder))
    assert names == ["train.data-00000-of-00001", "train.index"]
    idx = read_index(str(folder / "train.index"))
    assert (idx.num_shards, idx.entries) == (1, 600)
    assert idx.shard_ends == ((folder / "train.data-00000-of-00001").stat().st_size,)
    (cache,) = find_tf_caches(str(folder), names)
    assert (cache.path, cache.state, cache.files, cache.problems) == (
        str(folder / "train"),
        "complete",
        tuple(names),
        (),
    )

    # A data shard cut short and an index that is not a table are named, never raised.
    data = folder / "train.data-00000-of-00001"
    os.truncate(data, data.stat().st_size - 100)
    (cache,) = find_tf_caches(str(folder), names)
    assert cache.state == "incomplete"
    assert cache.problems == (
        f"train.data-00000-of-00001 is {data.stat().st_size} bytes; the index places tensors up to "
        f"byte {idx.shard_ends[0]}",
    )
    raw = (folder / "train.index").read_bytes()
    with pytest.raises(TfIndexError, match="no table magic number"):
        parse_index(raw[:-1] + b"\x00")
    for cut in range(0, len(raw), max(1, len(raw) // 97)):  # every truncation fails cleanly
        with pytest.raises(TfIndexError):
            parse_index(raw[:cut])


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from cachetool.cli.app import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"}, catch_exceptions=False)


def _ls(folder: Path) -> list[dict[str, Any]]:
    result = _cli("ls", "--cache-dir", str(folder), "--json")
    assert result.exit_code == 0, result.output
    return [e for e in json.loads(result.stdout)["entries"] if e["kind"] == "tf-cache"]


def _gc(folder: Path) -> dict[str, Any]:
    tmp = folder.parent / "tmp"  # never the real temp dir: other processes' pymp-* folders are there
    tmp.mkdir(exist_ok=True)
    result = _cli(
        "gc", "--cache-dir", str(folder), "--temp", "--tmp-dir", str(tmp), "--min-age", "0", "-y", "--json"
    )
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_gc_keeps_a_live_writer_and_clears_a_killed_ones_lockfile_so_the_next_run_works(
    tmp_path: Path, isolated_env: Path, tf_writes: Callable[[Path, int], str | None]
) -> None:
    """While a tf.data writer runs, its lockfile and temp state are one entry `being-written` by
    its pid (`find_tf_caches`), `ls` shows it as one `tf-cache` entry being written by that pid,
    and `gc --temp --min-age 0 -y` in a loop keeps its lockfile and partial shard. Killed, the same
    files are `abandoned`, and they are exactly what blocks the next run (it fails on the
    lockfile, as users report; the files it then removes are put back as they were); `verify`
    says so; gc removes exactly the lockfile and partial
    shard; the next run then writes the cache, which `ls` shows `complete` and `verify` finds
    sound. (One writer, killed once, for both the model's and the commands' view: each
    TensorFlow start costs seconds.)"""
    folder = tmp_path / "tfcache"
    proc = _writer(tmp_path, folder / "train", 100_000, 0.002)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    try:
        names = sorted(n for n in os.listdir(folder) if n != ".cachetool")
        (live,) = find_tf_caches(str(folder), names, holders=_holders(folder))
        assert (live.path, live.state, live.writer_pids) == (
            str(folder / "train"),
            "being-written",
            (proc.pid,),
        )
        (listed,) = _ls(folder)
        assert (listed["prefix"], listed["state"], listed["complete"]) == ("train", "being-written", False)
        assert listed["writer_pids"] == [proc.pid] and listed["files"] == 2
        for _ in range(3):
            doc = _gc(folder)
            assert doc["result"]["removed"] == []
            assert [s["reason"] for s in doc["plan"]["skipped"]] == [f"being written by pid {proc.pid}"]
            assert (folder / "train_0.lockfile").exists() and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    leftovers = sorted(n for n in os.listdir(folder) if n != ".cachetool")
    assert leftovers[-1] == "train_0.lockfile"
    assert leftovers[0].startswith("train_0.data-00000-of-00001.tempstate")
    (dead,) = find_tf_caches(str(folder), leftovers, holders=_holders(folder))
    # Abandoned, not incomplete: its lockfile holds TensorFlow's `Created at:` line.
    assert dead.state == "abandoned"
    assert [n for n in dead.files if tf_leftover_name(n)] == leftovers

    # The next run fails on the lockfile, as users report. Failing, TensorFlow removes those files:
    # the killed writer's files, kept aside byte for byte with their times, go back for the rest.
    kept = tmp_path / "kept"
    kept.mkdir()
    for n in leftovers:
        shutil.copy2(folder / n, kept / n)
    error = tf_writes(folder / "train", 10)
    assert error is not None and "There appears to be a concurrent caching iterator running" in error
    for n in leftovers:
        shutil.copy2(kept / n, folder / n)

    (listed,) = _ls(folder)
    assert (listed["state"], listed["complete"], listed["size"]) == (
        "abandoned",
        False,
        sum((folder / n).stat().st_size for n in leftovers),
    )
    verify = _cli("verify", "--cache-dir", str(folder), "--json")
    (finding,) = json.loads(verify.stdout)["findings"]
    assert (finding["severity"], finding["kind"]) == ("warning", "tf-cache")
    assert "AlreadyExistsError" in finding["problem"]

    doc = _gc(folder)
    (item,) = doc["result"]["removed"]
    assert item["kind"] == "tf-cache" and item["files"] == len(leftovers)
    assert os.listdir(folder) == [".cachetool"]  # gc's lock and its record of the removal

    assert tf_writes(folder / "train", 50) is None
    (done,) = _ls(folder)
    assert (done["state"], done["complete"], done["problems"]) == ("complete", True, [])
    verify = _cli("verify", "--cache-dir", str(folder), "--json")
    assert verify.exit_code == 0 and json.loads(verify.stdout)["findings"] == []

    # A data shard cut short is an error verify names; gc --temp never touches a cache's data.
    data = folder / "train.data-00000-of-00001"
    os.truncate(data, data.stat().st_size // 2)
    verify = _cli("verify", "--cache-dir", str(folder), "--json")
    (finding,) = json.loads(verify.stdout)["findings"]
    assert finding["severity"] == "error" and "the index places tensors up to byte" in finding["problem"]
    assert _gc(folder)["result"]["removed"] == [] and data.exists()
