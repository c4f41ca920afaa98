"""`cachetool remote push|pull` and the Python `push`/`pull` against real S3 servers (moto in the
fast lane, SeaweedFS in the slow one): write-once uploads, checked downloads, signed records.

The cache files here are real Arrow streams as `datasets` writes them (schema metadata naming
the fingerprint); tests/remote/test_pipelines.py runs real `datasets` pipelines."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cachetool.remote.transfer import pull, push
from tests.conftest import invoke
from tests.remote.conftest import Bucket

FP = "0123456789abcdef"
FOLDER = "csv/default-1/0.0.0/abc"


def cache_file(path: Path, fingerprint: str, rows: int = 100, batch: int = 30) -> bytes:
    """Write a cache file as `datasets` does (a stream of batches of `batch` rows whose
    `huggingface` metadata names the fingerprint) and return its bytes."""
    meta = {"huggingface": json.dumps({"info": {"features": {}}, "fingerprint": fingerprint})}
    table = pa.table({"id": list(range(rows)), "text": [f"row {i}" for i in range(rows)]})
    table = table.replace_schema_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(os.fspath(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=batch)
    return path.read_bytes()


@pytest.fixture
def host_a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache root holding one result: `cache-<FP>.arrow` in a dataset folder."""
    for k in list(os.environ):
        if k.startswith(("CACHETOOL_REMOTE", "AWS_")):
            monkeypatch.delenv(k)
    root = tmp_path / "a"
    cache_file(root / FOLDER / f"cache-{FP}.arrow", FP)
    return root


def use(monkeypatch: pytest.MonkeyPatch, bucket: Bucket, **extra: str) -> None:
    for k, v in bucket.env(**extra).items():
        monkeypatch.setenv(k, v)


def test_push_then_pull_gives_the_same_file_where_its_producer_had_it(
    bucket: Bucket, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pushed result lands on the remote as its file and a record written last; pulled into
    another cache root it is the same bytes, at the same place under the root."""
    use(monkeypatch, bucket)
    (pushed,) = push([FP], cache_dir=host_a)
    assert pushed.sent == (host_a / FOLDER / f"cache-{FP}.arrow").stat().st_size > 0
    assert bucket.objects() == [f"{FP}/cache-{FP}.arrow", f"{FP}/record.json"]
    record = json.loads(bucket.get(f"{FP}/record.json"))
    assert record["folder"] == FOLDER and record["versions"]["pyarrow"] == pa.__version__
    assert {"host", "user", "time"} <= record.keys() and "signature" not in record

    b = tmp_path / "b"
    b.mkdir()
    got = pull(FP, cache_dir=b)
    assert got.files == (b / FOLDER / f"cache-{FP}.arrow",)
    assert got.files[0].read_bytes() == (host_a / FOLDER / f"cache-{FP}.arrow").read_bytes()
    assert sorted(os.listdir(b / FOLDER)) == [f"cache-{FP}.arrow"]  # no temporary file left
    assert pull(FP, cache_dir=b).received == 0  # there already: nothing downloaded


def test_pulled_shards_get_the_mode_the_umask_gives_every_new_file(
    bucket: Bucket, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shards of a num_proc map are downloaded at once; each placed file is readable as any file
    the user's umask makes (0o640 under umask 027), none left writable by others."""
    use(monkeypatch, bucket)
    shards = [f"cache-{FP}_{i:05d}_of_00004.arrow" for i in range(4)]
    for name in shards:
        cache_file(host_a / FOLDER / name, f"{FP}_{shards.index(name):05d}_of_00004")
    (host_a / FOLDER / f"cache-{FP}.arrow").unlink()
    push([FP], cache_dir=host_a)
    b = tmp_path / "b"
    b.mkdir()
    old = os.umask(0o027)
    try:
        got = pull(FP, cache_dir=b)
    finally:
        os.umask(old)
    assert sorted(f.name for f in got.files) == shards
    assert {oct(f.stat().st_mode & 0o777) for f in got.files} == {oct(0o640)}


def test_a_second_push_sends_nothing(bucket: Bucket, host_a: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pushing what is on the remote already is a no-op that says so (exit 0)."""
    use(monkeypatch, bucket)
    first = invoke("remote", "push", FP, "--cache-dir", str(host_a))
    assert first.exit_code == 0 and first.stdout.startswith(f"Pushed {FP}: 1 file,"), first.output
    before = {k: bucket.get(k) for k in bucket.objects()}
    again = invoke("remote", "push", FP, "--cache-dir", str(host_a))
    assert again.exit_code == 0, again.output
    assert again.stdout == f"{FP} is already on the remote: nothing sent\n"
    assert {k: bucket.get(k) for k in bucket.objects()} == before


def test_remote_pull_says_once_what_it_did_and_its_json_is_one_document(
    bucket: Bucket, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`remote pull` into a cache whose source folder is prepared prints one line, "Pulled ...",
    not also "... is in the cache already"; a second pull prints only that one; with --json each
    prints one JSON document and nothing else."""
    use(monkeypatch, bucket)
    push([FP], cache_dir=host_a)
    for fmt in ([], ["--json"]):
        b = tmp_path / f"b{len(fmt)}"
        (b / FOLDER).mkdir(parents=True)
        (b / FOLDER / "dataset_info.json").write_text("{}")
        first = invoke("remote", "pull", FP, "--cache-dir", str(b), *fmt)
        again = invoke("remote", "pull", FP, "--cache-dir", str(b), *fmt)
        assert first.exit_code == again.exit_code == 0, (first.output, again.output)
        if fmt:
            assert json.loads(first.stdout)["pulled"]["bytes_received"] > 0
            assert json.loads(again.stdout)["pulled"]["bytes_received"] == 0
        else:
            assert first.stdout.startswith(f"Pulled {FP}: ") and "already" not in first.stdout, first.stdout
            assert again.stdout == f"{FP} is in the cache already: nothing received\n"


def test_a_tampered_file_is_refused_and_nothing_is_placed(
    bucket: Bucket, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose bytes are not the ones its record names is refused with one line (exit 1),
    and nothing is placed in the cache, not even a temporary file."""
    use(monkeypatch, bucket)
    push([FP], cache_dir=host_a)
    good = bucket.get(f"{FP}/cache-{FP}.arrow")
    # Under write-once the object cannot be replaced: the same record over other bytes, at a
    # fresh prefix, is what a tampered store serves.
    other = Bucket(bucket.server, bucket.prefix + "-tampered")
    other.put(f"{FP}/cache-{FP}.arrow", good[:-20] + bytes(20 - 1) + b"\x01")
    other.put(f"{FP}/record.json", bucket.get(f"{FP}/record.json"))
    b = tmp_path / "b"
    b.mkdir()
    result = invoke("remote", "pull", FP, "--cache-dir", str(b), env={"CACHETOOL_REMOTE": other.url})
    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"Error: {other.url}/{FP}/cache-{FP}.arrow: its xxh3 is not the one its record names: not used\n"
    )
    assert not (b / FOLDER).exists() or os.listdir(b / FOLDER) == []


def test_a_record_whose_checksums_lie_is_refused_by_the_arrow_check(
    bucket: Bucket, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record naming the checksum of a cut file (the checksums agree, the data does not) is
    refused: the file is not a whole Arrow stream."""
    from cachetool.remote.transfer import file_digest

    use(monkeypatch, bucket)
    push([FP], cache_dir=host_a)
    cut = bucket.get(f"{FP}/cache-{FP}.arrow")[:-8]  # no end-of-stream marker
    (tmp_path / "cut").write_bytes(cut)
    size, digest = file_digest(tmp_path / "cut")
    record = json.loads(bucket.get(f"{FP}/record.json"))
    record["files"] = [{"name": f"cache-{FP}.arrow", "size": size, "xxh3": digest}]
    other = Bucket(bucket.server, bucket.prefix + "-lies")
    other.put(f"{FP}/cache-{FP}.arrow", cut)
    other.put(f"{FP}/record.json", json.dumps(record).encode())
    b = tmp_path / "b"
    b.mkdir()
    result = invoke("remote", "pull", FP, "--cache-dir", str(b), env={"CACHETOOL_REMOTE": other.url})
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"Error: cache-{FP}.arrow from the remote is not used: no end-of-stream")
    assert not (b / FOLDER).exists() or os.listdir(b / FOLDER) == []


def test_with_a_key_set_an_unsigned_or_badly_signed_record_is_never_used(
    bucket: Bucket, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With CACHETOOL_REMOTE_KEY set, a record pushed without the key (or with another key) is
    refused; one signed with the key is used."""
    use(monkeypatch, bucket)
    push([FP], cache_dir=host_a)  # unsigned
    b = tmp_path / "b"
    b.mkdir()
    unsigned = invoke("remote", "pull", FP, "--cache-dir", str(b), env={"CACHETOOL_REMOTE_KEY": "s3cret"})
    assert unsigned.exit_code == 1, unsigned.output
    assert unsigned.stderr == (
        f"Error: the remote record of {FP} is not used: unsigned, and CACHETOOL_REMOTE_KEY is set\n"
    )
    signed = Bucket(bucket.server, bucket.prefix + "-signed")
    push([FP], cache_dir=host_a, remote=signed.url, key="s3cret")
    wrong = invoke(
        "remote",
        "pull",
        FP,
        "--cache-dir",
        str(b),
        "--remote",
        signed.url,
        env={"CACHETOOL_REMOTE_KEY": "other"},
    )
    assert wrong.exit_code == 1 and "its signature does not match CACHETOOL_REMOTE_KEY" in wrong.stderr
    assert not (b / FOLDER).exists()
    monkeypatch.setenv("CACHETOOL_REMOTE_KEY", "s3cret")
    assert pull(FP, cache_dir=b, remote=signed.url).received > 0


def test_files_left_without_a_record_are_not_used_and_the_next_push_completes(
    bucket: Bucket, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an upload killed before its record left (the file, no record) is not a result: pull
    says it is not on the remote (exit 2). The next push keeps the identical object and writes
    the record; an object of other bytes at a file's key is never replaced (exit 1)."""
    use(monkeypatch, bucket)
    data = (host_a / FOLDER / f"cache-{FP}.arrow").read_bytes()
    bucket.put(f"{FP}/cache-{FP}.arrow", data)
    b = tmp_path / "b"
    b.mkdir()
    missing = invoke("remote", "pull", FP, "--cache-dir", str(b))
    assert missing.exit_code == 2 and missing.stderr == f"Error: {FP} is not on the remote {bucket.url}\n"
    (pushed,) = push([FP], cache_dir=host_a)
    assert pushed.sent == 0 and not pushed.already and f"{FP}/record.json" in bucket.objects()

    squatted = Bucket(bucket.server, bucket.prefix + "-squatted")
    squatted.put(f"{FP}/cache-{FP}.arrow", b"not these bytes")
    result = invoke("remote", "push", FP, "--cache-dir", str(host_a), "--remote", squatted.url)
    assert result.exit_code == 1, result.output
    assert "already holds other bytes" in result.stderr and "not replaced" in result.stderr
    assert squatted.objects() == [f"{FP}/cache-{FP}.arrow"]


def test_a_file_larger_than_one_put_takes_is_a_one_line_error_and_nothing_is_sent(
    moto_bucket: Bucket, host_a: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write-once put is one request (never multipart), so a file over the remote's limit for
    one PUT (5 GiB on S3; lowered here with CACHETOOL_REMOTE_MAX_PUT) stops the push before
    anything is sent, in one line naming the file and the limit (exit 2)."""
    use(monkeypatch, moto_bucket)
    local = host_a / FOLDER / f"cache-{FP}.arrow"
    result = invoke("remote", "push", FP, "--cache-dir", str(host_a), env={"CACHETOOL_REMOTE_MAX_PUT": "1kB"})
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {local}: ") and result.stderr.count("\n") == 1, result.stderr
    assert "over the 1.0 kB one write-once put can write to" in result.stderr
    assert moto_bucket.objects() == []
    assert invoke("remote", "push", FP, "--cache-dir", str(host_a)).exit_code == 0


def test_no_remote_configured_is_a_usage_error(host_a: Path) -> None:
    """Without CACHETOOL_REMOTE or --remote, push says how to configure one (exit 2)."""
    result = invoke("remote", "push", FP, "--cache-dir", str(host_a))
    assert result.exit_code == 2
    assert result.stderr == "Error: no remote: set CACHETOOL_REMOTE=s3://bucket/prefix or pass --remote\n"


def test_pull_over_a_damaged_local_file_does_not_say_the_result_is_there(
    moto_bucket: Bucket, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`remote pull FP` where the cache holds a file of that name with other bytes than the
    remote's (cut short here) keeps it, and says it differs and how to check it, instead of
    "FP is in the cache already: nothing received"; `--json` names it in `other_bytes` (and
    prints nothing else). A pull that placed files never adds "in the cache already"."""
    use(monkeypatch, moto_bucket)
    push([FP], cache_dir=host_a)
    local = host_a / FOLDER / f"cache-{FP}.arrow"
    whole = local.read_bytes()
    local.write_bytes(whole[: len(whole) // 2])
    human = invoke("remote", "pull", FP, "--cache-dir", str(host_a))
    assert human.exit_code == 0, human.output
    assert "in the cache already" not in human.stdout, human.output
    assert f"cache-{FP}.arrow in the cache is not the remote's: kept" in human.stderr, human.output
    doc = json.loads(invoke("remote", "pull", FP, "--cache-dir", str(host_a), "--json").stdout)
    assert doc["pulled"]["other_bytes"] == [os.fspath(local)]
    assert local.read_bytes() == whole[: len(whole) // 2]  # never replaced
    local.write_bytes(whole)
    same = invoke("remote", "pull", FP, "--cache-dir", str(host_a), "--json")
    assert json.loads(same.stdout)["pulled"]["other_bytes"] == []
    # A pull into a cache whose source is prepared says it pulled, and only that.
    b = tmp_path / "b"
    (b / FOLDER).mkdir(parents=True)
    (b / FOLDER / "dataset_info.json").write_text("{}")
    pulled = invoke("remote", "pull", FP, "--cache-dir", str(b))
    assert pulled.stdout.startswith(f"Pulled {FP}: ") and "already" not in pulled.stdout, pulled.output


def test_a_signed_push_over_an_unsigned_record_says_readers_refuse_it_not_other_files(
    moto_bucket: Bucket, host_a: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`remote push FP` with CACHETOOL_REMOTE_KEY set, when the remote holds FP's record unsigned
    (pushed from a host without the key) of these very files, says readers with the key refuse
    that record, not that it "names other files than this cache's"; `--json` says `same_files`
    true and why in `refused`."""
    use(monkeypatch, moto_bucket)
    push([FP], cache_dir=host_a)
    monkeypatch.setenv("CACHETOOL_REMOTE_KEY", "k1")
    again = invoke("remote", "push", FP, "--cache-dir", str(host_a))
    assert again.exit_code == 0, again.output
    assert "names other files" not in again.stderr, again.output
    assert "unsigned, and CACHETOOL_REMOTE_KEY is set" in again.stderr, again.output
    (doc,) = json.loads(invoke("remote", "push", FP, "--cache-dir", str(host_a), "--json").stdout)["pushed"]
    assert doc["same_files"] is True and "unsigned" in doc["refused"], doc


def test_no_credentials_anywhere_says_so_in_one_line(
    moto_bucket: Bucket, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no AWS credentials in the environment or ~/.aws (the client then asks the instance
    metadata service, here a closed port), a command on the remote fails in one line that says
    no credentials were found and how to give them, not only the client's error about a PUT to
    /latest/api/token."""
    for k in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_bucket.server.endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", "http://127.0.0.1:1")
    for args in (
        ("ls", moto_bucket.url),
        ("remote", "push", FP, "--cache-dir", str(host_a), "--remote", moto_bucket.url),
    ):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in line, line


def test_run_with_a_remote_that_is_not_a_url_is_a_usage_error(tmp_path: Path) -> None:
    """`cachetool run --remote team/cache script.py` (no s3://) stops before the script runs, in
    one line naming --remote (exit 2), instead of running it without the remote under a warning
    about CACHETOOL_REMOTE, which the user did not set."""
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHETOOL_REMOTE", "AWS_"))}
    args = [sys.executable, "-m", "cachetool", "run", "--remote", "team/cache", str(script)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("Error: Invalid value for --remote: not a remote URL")
    assert "Traceback" not in proc.stderr and not (tmp_path / "script.py.ran").exists()


@pytest.mark.slow
def test_nothing_remote_is_imported_unless_a_remote_is_used(tmp_path: Path) -> None:
    """Without a remote configured, neither `cachetool.remote` nor a listing imports the client
    library (start-up and `ls` cost what they did)."""
    import subprocess
    import sys

    code = (
        "import sys, cachetool.remote, cachetool.cli.ls;"
        "from cachetool.cli.ls import list_cache;"
        f"list_cache({str(tmp_path)!r});"
        "assert 'obstore' not in sys.modules, 'obstore imported'"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHETOOL_REMOTE")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).parents[2])


@pytest.mark.slow
def test_credentials_and_endpoint_come_from_aws_config_files(
    seaweed_server: Any, host_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no AWS_* variables, the profile of ~/.aws/credentials and ~/.aws/config (here through
    AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE) gives the keys, region and endpoint; a
    server that checks signatures (SeaweedFS) refuses a wrong key."""
    from tests.remote.conftest import ACCESS_KEY, SECRET_KEY

    bucket = Bucket(seaweed_server, "t-config-files")
    creds, config = tmp_path / "credentials", tmp_path / "config"
    config.write_text(f"[profile team]\nregion = us-east-1\nendpoint_url = {seaweed_server.endpoint}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "team")
    creds.write_text(f"[team]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = wrong\n")
    refused = invoke("remote", "push", FP, "--cache-dir", str(host_a), "--remote", bucket.url)
    assert refused.exit_code == 2 and refused.stderr.startswith("Error: cannot "), refused.output
    creds.write_text(f"[team]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    pushed = invoke("remote", "push", FP, "--cache-dir", str(host_a), "--remote", bucket.url)
    assert pushed.exit_code == 0, pushed.output
    monkeypatch.delenv("AWS_PROFILE")  # the tests' own client signs in by its arguments
    assert f"{FP}/record.json" in bucket.objects()
