"""`cachetool ls s3://...` and `cachetool verify s3://...` against real S3 servers: what a remote
holds, and whether a reader would use it (shallow: two range reads per file; --deep: every byte)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cachetool.remote.transfer import push
from tests.conftest import invoke
from tests.remote.conftest import Bucket
from tests.remote.test_remote import FOLDER, FP, cache_file

FP2 = "fedcba9876543210"


@pytest.fixture
def pushed(bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A remote holding two results (one of them two num_proc shards), pushed from a cache."""
    for k in list(os.environ):
        if k.startswith(("CACHETOOL_REMOTE", "AWS_")):
            monkeypatch.delenv(k)
    for k, v in bucket.env().items():
        monkeypatch.setenv(k, v)
    root = tmp_path / "a"
    cache_file(root / FOLDER / f"cache-{FP}.arrow", FP)
    for rank in range(2):
        cache_file(root / FOLDER / f"cache-{FP2}_{rank:05d}_of_00002.arrow", f"{FP2}_{rank:05d}_of_00002")
    push([], cache_dir=root)
    return bucket


def test_ls_of_a_remote_lists_each_result_and_says_which_no_reader_uses(pushed: Bucket) -> None:
    """One row per fingerprint with its files and bytes; files an upload left without a record
    are listed as not used."""
    pushed.put("0000aaaa0000aaaa/cache-0000aaaa0000aaaa.arrow", b"half an upload")
    doc = json.loads(invoke("ls", pushed.url, "--json").stdout)
    assert doc["remote"] == pushed.url
    assert [(e["fingerprint"], e["files"], e["record"]) for e in doc["entries"]] == [
        ("0000aaaa0000aaaa", 1, False),
        (FP, 1, True),
        (FP2, 2, True),
    ]
    human = invoke("ls", pushed.url, columns=100)
    assert human.exit_code == 0, human.output
    assert "no: not used" in human.stdout and "3 results, 4 files" in human.stdout
    assert invoke("ls", pushed.url, "-q").stdout.split() == ["0000aaaa0000aaaa", FP, FP2]
    empty = Bucket(pushed.server, pushed.prefix + "-empty").url
    assert invoke("ls", empty).stdout == f"Nothing on {empty} yet.\n"


def test_verify_of_a_remote_reads_two_ranges_per_file_and_deep_reads_every_byte(pushed: Bucket) -> None:
    """A remote of whole results verifies clean (exit 0): shallow reads the schema and the
    end-of-stream marker of each file, far fewer bytes than --deep, which reads them all."""
    shallow = invoke("verify", pushed.url, "--json")
    assert shallow.exit_code == 0, shallow.output
    doc = json.loads(shallow.stdout)
    assert (doc["results"], doc["files"], doc["findings"]) == (2, 3, [])
    deep = json.loads(invoke("verify", pushed.url, "--deep", "--json").stdout)
    assert deep["findings"] == [] and deep["bytes_read"] > doc["bytes_read"]
    human = invoke("verify", pushed.url)
    assert human.stdout.startswith("Checked 2 results (3 files, shallow: schema and end-of-stream marker;")


def test_verify_of_a_remote_names_each_result_a_reader_would_refuse(pushed: Bucket) -> None:
    """A record over a cut file, a record whose checksum lies, an unsigned record with a key
    set: each an error (exit 1) naming the file and why; files without a record, a warning."""
    good = pushed.get(f"{FP}/cache-{FP}.arrow")
    record = pushed.get(f"{FP}/record.json")
    bad = Bucket(pushed.server, pushed.prefix + "-bad")
    cut_fp, lie_fp = "1111111111111111", "2222222222222222"
    n = len(good) // 2  # a byte of column data: the headers still read
    flipped = good[:n] + bytes([good[n] ^ 1]) + good[n + 1 :]
    for fp, data in ((cut_fp, good[:-8]), (lie_fp, flipped)):
        doc = json.loads(record.replace(FP.encode(), fp.encode()))
        doc["files"][0]["size"] = len(data)
        bad.put(f"{fp}/cache-{fp}.arrow", data)
        bad.put(f"{fp}/record.json", json.dumps(doc).encode())
    bad.put("3333333333333333/cache-3333333333333333.arrow", good)
    result = invoke("verify", bad.url)
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        f"error: {cut_fp}/cache-{cut_fp}.arrow: no end-of-stream marker: the writer did not finish",
        "warning: 3333333333333333: files without a record (an upload stopped before its end): "
        "no reader uses them",
    ]
    assert " ".join(" ".join(lines[2:]).split()).endswith(f"on {bad.url}: 1 error, 1 warning")
    deep = invoke("verify", bad.url, lie_fp, "--deep")
    assert deep.stdout.splitlines()[0] == (
        f"error: {lie_fp}/cache-{lie_fp}.arrow: its xxh3 is not the one its record names"
    )
    keyed = invoke("verify", pushed.url, "--json", env={"CACHETOOL_REMOTE_KEY": "s3cret"})
    assert keyed.exit_code == 1
    problems = {f["problem"] for f in json.loads(keyed.stdout)["findings"]}
    assert problems == {
        f"the remote record of {fp} is not used: unsigned, and CACHETOOL_REMOTE_KEY is set"
        for fp in (FP, FP2)
    }


def test_gc_of_a_remote_removes_whole_old_results_and_never_an_upload_in_progress(pushed: Bucket) -> None:
    """`gc s3://... --older-than D` removes each result nobody wrote to for D (record and
    files), after a plan and a confirmation (`--yes` without a terminal); files without a record
    younger than an hour (an upload that may still run) stay whatever D says."""
    pushed.put("0000aaaa0000aaaa/cache-0000aaaa0000aaaa.arrow", b"an upload in progress")
    assert invoke("gc", pushed.url, "--older-than", "1h", "--dry-run").stdout.startswith("Nothing on ")
    plan = json.loads(invoke("gc", pushed.url, "--older-than", "0s", "--dry-run", "--json").stdout)
    assert [e["fingerprint"] for e in plan["items"]] == [FP, FP2] and plan["dry_run"] is True
    unconfirmed = invoke("gc", pushed.url, "--older-than", "0s")
    assert unconfirmed.exit_code == 2
    assert unconfirmed.stderr == "Error: refusing to remove 2 result(s) without confirmation: pass --yes\n"
    assert len(pushed.objects()) == 6
    done = invoke("gc", pushed.url, "--older-than", "0s", "--yes")
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[-1].startswith("Removed 2 results, ")
    assert pushed.objects() == ["0000aaaa0000aaaa/cache-0000aaaa0000aaaa.arrow"]
    wrong = invoke("gc", pushed.url, "--older-than", "0s", "--temp")
    assert (
        wrong.exit_code == 2
        and "gc of a remote takes --older-than, --max-size, --min-age, --dry-run and --yes only"
        in wrong.stderr
    )


def test_gc_of_a_remote_under_max_size_evicts_the_oldest_written_results_first(
    moto_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gc s3://... --max-size S` removes whole results, the least recently written first, until
    the rest is under S; files without a record younger than --min-age (an upload in progress:
    its record comes last) stay even at --max-size 0, and a saved dataset under the prefix is not
    a result at all."""
    import time

    for k in list(os.environ):
        if k.startswith(("CACHETOOL_REMOTE", "AWS_")):
            monkeypatch.delenv(k)
    for k, v in moto_bucket.env().items():
        monkeypatch.setenv(k, v)
    fp3 = "7777777777777777"
    root = tmp_path / "a"
    for rank in range(2):
        cache_file(root / FOLDER / f"cache-{FP2}_{rank:05d}_of_00002.arrow", f"{FP2}_{rank:05d}_of_00002")
    push([FP2], cache_dir=root)
    time.sleep(1.1)  # the store's times have a resolution of a second
    for fp in (FP, fp3):
        cache_file(root / FOLDER / f"cache-{fp}.arrow", fp)
    push([FP, fp3], cache_dir=root)
    moto_bucket.put("0000aaaa0000aaaa/cache-0000aaaa0000aaaa.arrow", b"an upload in progress")
    moto_bucket.put("squad/saved.json", b"{}")
    moto_bucket.put("squad/state.json", b"{}")
    listed = {
        e["fingerprint"]: e["size"]
        for e in json.loads(invoke("ls", moto_bucket.url, "--json").stdout)["entries"]
    }
    assert sorted(listed) == ["0000aaaa0000aaaa", FP, fp3, FP2]
    total = sum(listed.values())

    one = json.loads(
        invoke("gc", moto_bucket.url, "--max-size", str(total - 1), "--dry-run", "--json").stdout
    )
    assert [e["fingerprint"] for e in one["items"]] == [FP2]  # the oldest, not the first by name
    assert (one["size"], one["size_after"]) == (total, total - listed[FP2])
    under = invoke("gc", moto_bucket.url, "--max-size", str(total), "--dry-run")
    assert under.stdout.startswith(f"Nothing on {moto_bucket.url} to remove: "), under.output
    stale = json.loads(
        invoke("gc", moto_bucket.url, "--max-size", "0", "--min-age", "0s", "--dry-run", "--json").stdout
    )
    assert stale["items"][0]["fingerprint"] == "0000aaaa0000aaaa"  # a killed upload first

    done = invoke("gc", moto_bucket.url, "--max-size", "0", "-y")
    assert done.exit_code == 0, done.output
    assert "stays over --max-size" in done.stderr and "younger than --min-age" in done.stderr
    assert moto_bucket.objects() == [
        "0000aaaa0000aaaa/cache-0000aaaa0000aaaa.arrow",
        "squad/saved.json",
        "squad/state.json",
    ]


def test_ls_and_verify_of_the_prefix_above_a_remote_say_where_its_results_are(
    moto_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ls` or `verify` of a prefix holding no result itself, but a remote one level down (a
    bucket's root, say), names that remote instead of only "Nothing on ... yet" or a clean
    check of 0 results."""
    inner = Bucket(moto_bucket.server, moto_bucket.prefix + "/team")
    for k, v in inner.env().items():
        monkeypatch.setenv(k, v)
    cache_file(tmp_path / "a" / FOLDER / f"cache-{FP}.arrow", FP)
    push([], cache_dir=tmp_path / "a")
    for command in ("ls", "verify"):
        above = invoke(command, moto_bucket.url)
        assert above.exit_code == 0, above.output
        assert f"results are under {inner.url}" in above.stderr, (command, above.output)


def test_verify_of_a_result_the_remote_does_not_hold_is_an_error_not_a_clean_check(pushed: Bucket) -> None:
    """`verify s3://... FP` naming a fingerprint the remote does not hold says so in one line and
    exits 2, as `remote pull FP` does, instead of "Checked 0 results ... 0 errors" and exit 0."""
    missing = invoke("verify", pushed.url, FP, "deadbeefdeadbeef")
    assert missing.exit_code == 2, missing.output
    assert missing.stderr == f"Error: deadbeefdeadbeef is not on the remote {pushed.url}\n"


def test_shard_of_a_remote_is_refused_not_ignored(pushed: Bucket) -> None:
    """`ls s3://... --shard 0/2` and `verify s3://... --shard 0/2` say in one line that a remote
    is not sharded (exit 2), instead of listing or checking every result as if it were one shard
    (two such jobs would count each result twice)."""
    for command in ("ls", "verify"):
        sharded = invoke(command, pushed.url, "--shard", "0/2")
        assert sharded.exit_code == 2, (command, sharded.output)
        assert sharded.stdout == "" and sharded.stderr.startswith("Error: --shard"), sharded.output
