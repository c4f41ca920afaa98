"""`cachetool remote push --saved DIR URL` and `cachetool remote pull URL --to DIR`: a dataset saved
with `save_to_disk` (a `Dataset`, a `DatasetDict`) fetched once, checked, loadable with
`datasets.load_from_disk`, against a real S3 server (moto; SeaweedFS in the slow lane)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import invoke
from tests.remote.conftest import Bucket


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`one/`: a Dataset saved in 2 shards; `dd/`: a DatasetDict of two splits; `other/`: another Dataset."""
    import datasets

    base = tmp_path_factory.mktemp("saved")
    one = datasets.Dataset.from_dict({"id": list(range(300)), "text": [f"row {i}" for i in range(300)]})
    one.save_to_disk(base / "one", num_shards=2)
    datasets.DatasetDict(train=one, test=one.select(range(10))).save_to_disk(base / "dd")
    one.select(range(5)).save_to_disk(base / "other")
    return base


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in list(os.environ):
        if k.startswith(("CACHETOOL_REMOTE", "AWS_")):
            monkeypatch.delenv(k)


def use(monkeypatch: pytest.MonkeyPatch, bucket: Bucket) -> None:
    for k, v in bucket.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CACHETOOL_REMOTE")  # a saved dataset's URL is always named


def _inodes(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        os.fspath(p.relative_to(folder)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def test_a_saved_dataset_and_dataset_dict_are_fetched_once_and_load(
    bucket: Bucket, saved: Path, tmp_path: Path, env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """push --saved uploads the folder and its record last; pull --to gives a folder
    `load_from_disk` reads with the same rows; a second pull (and a second push) transfers 0
    bytes and leaves every file as it was."""
    import datasets

    use(monkeypatch, bucket)
    for name in ("one", "dd"):
        url = f"{bucket.url}/{name}"
        pushed = invoke("remote", "push", "--saved", str(saved / name), url, "--json")
        assert pushed.exit_code == 0, pushed.output
        doc = json.loads(pushed.stdout)["pushed"]
        assert doc["bytes"] > 0 and doc["url"] == url
        keys = [k.split("/", 1)[1] for k in bucket.objects() if k.startswith(name + "/")]
        assert "saved.json" in keys and len(keys) == len(doc["files"]) + 1
        again = invoke("remote", "push", "--saved", str(saved / name), url)
        assert again.exit_code == 0 and again.stdout.endswith(f"already at {url}: nothing sent\n"), (
            again.output
        )

        to = tmp_path / "elsewhere" / name
        first = invoke("remote", "pull", url, "--to", str(to))
        assert first.exit_code == 0, first.output
        assert first.stdout.startswith("Pulled ") and ", checked, into" in first.stdout, first.stdout
        assert not [p for p in to.parent.iterdir() if p.name.startswith(".")]  # no staging left
        got, want = datasets.load_from_disk(str(to)), datasets.load_from_disk(str(saved / name))
        if name == "dd":
            assert list(got) == ["train", "test"]
            assert (
                got["test"]["id"] == want["test"]["id"]
                and got["train"]._fingerprint == want["train"]._fingerprint
            )
        else:
            assert got["text"] == want["text"] and got._fingerprint == want._fingerprint
        before = _inodes(to)
        second = invoke("remote", "pull", url, "--to", str(to), "--json")
        assert second.exit_code == 0 and json.loads(second.stdout)["pulled"]["bytes"] == 0, second.output
        assert _inodes(to) == before


def test_a_tampered_or_unsigned_saved_dataset_is_refused_and_nothing_is_placed(
    moto_bucket: Bucket, saved: Path, tmp_path: Path, env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data file whose bytes are not the record's: refused (exit 1), no folder made, no
    staging folder left; with CACHETOOL_REMOTE_KEY set an unsigned record is refused too."""
    use(monkeypatch, moto_bucket)
    url = f"{moto_bucket.url}/one"
    assert invoke("remote", "push", "--saved", str(saved / "one"), url).exit_code == 0
    to = tmp_path / "to"
    unsigned = invoke("remote", "pull", url, "--to", str(to), env={"CACHETOOL_REMOTE_KEY": "k"})
    assert unsigned.exit_code == 1, unsigned.output
    assert (
        unsigned.stderr
        == f"Error: the saved dataset at {url} is not used: unsigned, and CACHETOOL_REMOTE_KEY is set\n"
    )
    (data,) = [k for k in moto_bucket.objects() if k.startswith("one/data-00000")]
    good = moto_bucket.get(data)
    moto_bucket.put(data, good[:-9] + bytes([good[-9] ^ 1]) + good[-8:])  # a plain put replaces it
    tampered = invoke("remote", "pull", url, "--to", str(to))
    assert tampered.exit_code == 1, tampered.output
    assert "its xxh3 is not the one its record names: not used" in tampered.stderr
    assert list(tmp_path.iterdir()) == []


def test_pull_never_replaces_another_dataset_without_yes(
    moto_bucket: Bucket, saved: Path, tmp_path: Path, env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder holding another saved dataset (or other files) stays as it is, and the error
    names it (exit 2); with --yes it is replaced by the remote's, checked, and loads."""
    import datasets

    use(monkeypatch, moto_bucket)
    url = f"{moto_bucket.url}/one"
    invoke("remote", "push", "--saved", str(saved / "one"), url)
    to = tmp_path / "to"
    datasets.load_from_disk(str(saved / "other")).save_to_disk(to)
    theirs = json.loads((to / "state.json").read_text())["_fingerprint"]
    refused = invoke("remote", "pull", url, "--to", str(to))
    assert refused.exit_code == 2, refused.output
    assert refused.stderr == (
        f"Error: {to} holds another dataset (fingerprint {theirs}): not replaced; pass --yes to replace it\n"
    )
    assert datasets.load_from_disk(str(to)).num_rows == 5
    replaced = invoke("remote", "pull", url, "--to", str(to), "--yes")
    assert replaced.exit_code == 0 and "(replacing what it held)" in replaced.stdout, replaced.output
    assert datasets.load_from_disk(str(to)).num_rows == 300
    assert sorted(p.name for p in tmp_path.iterdir()) == ["to"]  # nothing old or staged left
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine")
    other = invoke("remote", "pull", url, "--to", str(junk))
    assert other.exit_code == 2 and f"{junk} holds other files: not replaced" in other.stderr
    assert (junk / "notes.txt").read_text() == "mine"
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    linked = invoke("remote", "pull", url, "--to", str(tmp_path / "link"))
    assert linked.exit_code == 0, linked.output
    assert datasets.load_from_disk(str(tmp_path / "link")).num_rows == 300
    assert (tmp_path / "link").is_symlink()
    missing = invoke("remote", "pull", f"{moto_bucket.url}/nothing", "--to", str(tmp_path / "n"))
    assert missing.exit_code == 2 and "no saved dataset at" in missing.stderr


# A pull that stops inside its download, its staging folder made: SIGKILLed there ("die"), or
# waiting there until the test kills it (after making the file named instead), live meanwhile.
_STOPPED_PULL = """\
import os, signal, sys, time
import cachetool.remote.saved as saved
from cachetool.cli.entry import main

marker = sys.argv.pop(1)  # "die", or the file to make once waiting


def stop(*args):
    if marker == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    open(marker, "w").close()
    time.sleep(120)


saved._fetch_all = stop
main()
"""


def test_a_pull_removes_the_staging_folders_of_killed_pulls_to_its_folder_never_a_live_one(
    moto_bucket: Bucket, saved: Path, tmp_path: Path, env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `remote pull --to DIR` SIGKILLed while downloading leaves its `.DIR.pull-…` folder; the
    next pull to DIR removes it, and leaves the one of a pull to DIR that still runs. Nothing
    removed a killed pull's folder: each kill left one more beside DIR."""
    import subprocess
    import sys
    import time

    use(monkeypatch, moto_bucket)
    url = f"{moto_bucket.url}/one"
    assert invoke("remote", "push", "--saved", str(saved / "one"), url).exit_code == 0
    to, marker = tmp_path / "to", tmp_path / "waiting"
    pull = [sys.executable, "-c", _STOPPED_PULL]
    args = ["remote", "pull", url, "--to", str(to)]
    env = {k: v for k, v in os.environ.items() if k != "CACHETOOL_REMOTE"}
    killed = subprocess.run([*pull, "die", *args], env=env, capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    (dead,) = (p for p in tmp_path.iterdir() if p.name.startswith(".to.pull-"))
    live = subprocess.Popen([*pull, str(marker), *args], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert live.poll() is None and time.monotonic() < deadline, live.stderr
            time.sleep(0.02)
        (staging,) = (p for p in tmp_path.iterdir() if p.name.startswith(".to.pull-") and p != dead)
        pulled = invoke("remote", "pull", url, "--to", str(to))
        assert pulled.exit_code == 0, pulled.output
        assert not dead.exists() and staging.is_dir()
    finally:
        live.kill()
        live.wait()
