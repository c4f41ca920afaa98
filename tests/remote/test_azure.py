"""An `az://` remote against a real Azure Blob Storage server on 127.0.0.1: Azurite, the Azure
Storage emulator (npm package azurite; these tests are skipped where `azurite-blob` is not on
PATH). The same client and code as for S3: write-once puts are `If-None-Match: *` there too."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachetool.remote.client import open_remote
from tests.conftest import invoke
from tests.remote.servers import AzureServer, azurite
from tests.remote.test_remote import FOLDER, FP, cache_file

pytestmark = pytest.mark.slow  # Azurite (node) takes ~2-6 s to start

CONTAINER = "cachetool-tests"


@pytest.fixture(scope="module")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureServer]:
    """Azurite's blob service with the container `CONTAINER`."""
    if shutil.which("azurite-blob") is None:
        pytest.skip("Azurite is not installed (npm install -g azurite)")
    with azurite(tmp_path_factory.mktemp("azurite")) as server:
        server.create_container(CONTAINER)
        yield server


@pytest.fixture
def host_a(azure: AzureServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache root holding one result, and the environment of a user of the emulator."""
    for k in list(os.environ):
        if k.startswith(("CACHETOOL_REMOTE", "AWS_", "AZURE_", "AZURITE_")):
            monkeypatch.delenv(k)
    for k, v in azure.env().items():
        monkeypatch.setenv(k, v)
    root = tmp_path / "a"
    cache_file(root / FOLDER / f"cache-{FP}.arrow", FP)
    return root


def fresh_url() -> str:
    return f"az://{CONTAINER}/t-{uuid.uuid4().hex[:12]}"


def test_push_pull_ls_verify_and_gc_on_azure(host_a: Path, tmp_path: Path) -> None:
    """Pushed to an az:// remote, a result is its file and a record; a second push sends
    nothing; pulled into another cache root it is the same bytes at the same place; `ls` and
    `verify` (shallow: range reads; and --deep) see it whole; `gc` removes it, record and file."""
    url = fresh_url()
    first = invoke("remote", "push", FP, "--cache-dir", str(host_a), "--remote", url)
    assert first.exit_code == 0 and first.stdout.startswith(f"Pushed {FP}: 1 file,"), first.output
    remote = open_remote(url)
    assert sorted(o["path"] for o in remote.list()) == [f"{FP}/cache-{FP}.arrow", f"{FP}/record.json"]
    again = invoke("remote", "push", FP, "--cache-dir", str(host_a), "--remote", url)
    assert again.stdout == f"{FP} is already on the remote: nothing sent\n", again.output

    b = tmp_path / "b"
    b.mkdir()
    pulled = invoke("remote", "pull", FP, "--cache-dir", str(b), "--remote", url)
    assert pulled.exit_code == 0, pulled.output
    name = f"cache-{FP}.arrow"
    assert (b / FOLDER / name).read_bytes() == (host_a / FOLDER / name).read_bytes()
    assert os.listdir(b / FOLDER) == [name]  # no temporary file left

    assert invoke("ls", url, "-q").stdout.split() == [FP]
    for depth in ([], ["--deep"]):
        verified = json.loads(invoke("verify", url, "--json", *depth).stdout)
        assert (verified["results"], verified["files"], verified["findings"]) == (1, 1, [])
    removed = invoke("gc", url, "--older-than", "0s", "--yes")
    assert removed.stdout.splitlines()[-1].startswith("Removed 1 result, "), removed.output
    assert list(remote.list()) == []


def test_azure_never_replaces_an_object_and_a_tampered_copy_is_refused(host_a: Path, tmp_path: Path) -> None:
    """An object of other bytes at a file's key stops the push (exit 1) and stays as it was; a
    record over bytes that are not the ones it names is refused on pull, nothing placed."""
    squatted = open_remote(fresh_url())
    squatted.put_once(f"{FP}/cache-{FP}.arrow", b"not these bytes")
    result = invoke("remote", "push", FP, "--cache-dir", str(host_a), "--remote", squatted.url)
    assert result.exit_code == 1, result.output
    assert "already holds other bytes" in result.stderr and "not replaced" in result.stderr
    assert squatted.get(f"{FP}/cache-{FP}.arrow") == b"not these bytes"
    assert [o["path"] for o in squatted.list()] == [f"{FP}/cache-{FP}.arrow"]

    good = open_remote(fresh_url())
    invoke("remote", "push", FP, "--cache-dir", str(host_a), "--remote", good.url)
    tampered = open_remote(fresh_url())
    data = good.get(f"{FP}/cache-{FP}.arrow")
    assert data is not None
    tampered.put_once(f"{FP}/cache-{FP}.arrow", data[:-20] + bytes(19) + b"\x01")
    tampered.put_once(f"{FP}/record.json", good.get(f"{FP}/record.json"))
    b = tmp_path / "b"
    b.mkdir()
    refused = invoke("remote", "pull", FP, "--cache-dir", str(b), "--remote", tampered.url)
    assert refused.exit_code == 1, refused.output
    assert refused.stderr == (
        f"Error: {tampered.url}/{FP}/cache-{FP}.arrow: its xxh3 is not the one its record names: not used\n"
    )
    assert not (b / FOLDER).exists() or os.listdir(b / FOLDER) == []
