"""A fleet view: `ls` and `verify` split into `--shard i/n` jobs (one or many hosts), and
`cachetool merge` joining their `--json` documents into one report.

The cache is the leftovers cache (complete entries, a traced chain with its parents recorded in
the ledger, saved datasets, and the leftovers of killed processes). Another host is a real process
in its own UTS and PID namespaces (`unshare`, host name `node-7`), as in tests/test_hosts.py.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests import forks
from tests.conftest import copy_cache, hf_env, invoke

CACHETOOL = [sys.executable, "-m", "cachetool"]
#: What `merge --json` says of its inputs, not of the caches: the rest is the same however the
#: caches were split into shards.
ABOUT_INPUTS = ("documents", "shard_sets")


def cachetool_json(base: Path, *args: str, ok: tuple[int, ...] = (0,), host: Sequence[str] = ()) -> Any:
    """`cachetool ARGS --json` in a process of its own (on another host with `host`; else forked
    from the warm parent, `forks.run`); its document."""
    proc = (subprocess.run if host else forks.run)(
        [*host, *CACHETOOL, *args, "--json"],
        env=hf_env(base, COLUMNS="200"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert proc.returncode in ok, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_a_fingerprint_falls_in_the_same_shard_whatever_else_exists() -> None:
    """The shard of a fingerprint is its hex prefix's range: the same for every n wherever it is
    cached; 16,000 random fingerprints spread evenly over 8 shards (each within 5% of an eighth);
    what has no fingerprint is placed by its path relative to the root, the same under any root."""
    from cachetool.cache.shard import Shard, parse_shard

    rng = random.Random(7)
    fps = [f"{rng.getrandbits(64):016x}" for _ in range(16000)]
    shards = [Shard(i, 8) for i in range(8)]
    counts = Counter(next(s.index for s in shards if s.holds(fp, "", Path("/"))) for fp in fps)
    assert sorted(counts) == list(range(8))
    assert all(abs(n - 2000) < 100 for n in counts.values()), counts
    # a hex prefix range: with 16 shards, shard 3 holds the fingerprints starting with 3
    assert Shard(3, 16).holds("3fffffffffffffff", "", Path("/"))
    assert not Shard(3, 16).holds("4" * 16, "", Path("/"))
    for n in (1, 2, 3, 5, 8):

        def holders(fingerprint: str | None, path: str, root: str, n: int = n) -> list[int]:
            return [i for i in range(n) if Shard(i, n).holds(fingerprint, path, Path(root))]

        placed = holders(None, "/x/cache/tmpab12", "/x/cache")
        assert len(placed) == 1 and placed == holders(None, "/y/c/tmpab12", "/y/c"), n
        named = holders("my-step", "/x/a", "/x")
        assert len(named) == 1 and named == holders("my-step", "/y", "/"), n
    assert parse_shard((2, 8)) == parse_shard("2/8") == Shard(2, 8)


@pytest.mark.parametrize("command", ["ls", "verify"])
@pytest.mark.parametrize("value", ["0/0", "3/2", "a/b", "1", "-1/2"])
def test_a_bad_shard_is_a_one_line_usage_error(isolated_env: Path, command: str, value: str) -> None:
    """`--shard 0/0`, `3/2`, `a/b`: one `Error:` line naming --shard, exit 2, before any reading."""
    result = invoke(command, f"--shard={value}", "--cache-dir", str(isolated_env))
    assert result.exit_code == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: invalid --shard"), result.stderr


@pytest.fixture(scope="module")
def shards(leftovers: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`ls --json` and `verify --deep --json` of a copy of the leftovers cache, whole and in 4
    shards, made once for the tests that only read them."""
    import shutil

    copy = tmp_path_factory.mktemp("fleet") / "base"
    for name in ("cache", "tmp"):
        shutil.copytree(leftovers["base"] / name, copy / name, symlinks=True)
    docs: dict[str, Any] = {}
    for command in (["ls"], ["verify", "--deep"]):
        ok = (0, 1)
        docs[command[0]] = cachetool_json(copy, *command, ok=ok)
        docs[command[0] + "_shards"] = [
            cachetool_json(copy, *command, "--shard", f"{i}/4", ok=ok) for i in range(4)
        ]
    return docs


@pytest.mark.slow
def test_four_shards_hold_each_entry_and_finding_exactly_once(shards: dict[str, Any]) -> None:
    """Over 4 shards every entry of `ls` (leftovers included) is listed exactly once, the totals
    per kind add up to the whole listing's, and `verify --deep` checks each entry, file and byte
    once and finds the same problems; each document names its shard and its host."""
    import socket

    whole, parts = shards["ls"], shards["ls_shards"]
    paths = [e["path"] for doc in parts for e in doc["entries"]]
    assert sorted(paths) == sorted(e["path"] for e in whole["entries"]) and len(set(paths)) == len(paths)
    assert all(doc["entries"] for doc in parts)  # an even share: no shard empty
    totals: Counter[tuple[str, str]] = Counter()
    for doc in parts:
        for kind, t in doc["totals"].items():
            totals.update({(kind, "files"): t["files"], (kind, "bytes"): t["bytes"]})
    want = {(k, f): v for k, t in whole["totals"].items() for f, v in t.items()}
    assert dict(totals) == want
    assert [doc["shard"] for doc in parts] == [{"index": i, "count": 4} for i in range(4)]
    assert whole["shard"] is None and {doc["host"] for doc in parts} == {socket.gethostname()}

    whole_v, parts_v = shards["verify"], shards["verify_shards"]
    for key in ("entries_checked", "files_checked", "bytes_checked"):
        assert sum(doc[key] for doc in parts_v) == whole_v[key], key
    found = sorted((f["severity"], f["entry"], f["path"]) for doc in parts_v for f in doc["findings"])
    assert found == sorted((f["severity"], f["entry"], f["path"]) for f in whole_v["findings"]) and found


def about_caches(merged: dict[str, Any]) -> dict[str, Any]:
    """What `merge --json` says of the caches, the ages in its problems' sentences left out (the
    jobs ran seconds apart: "last written 3s ago", "4s ago")."""
    import re

    doc = {k: v for k, v in merged.items() if k not in ABOUT_INPUTS}
    doc["problems"] = [
        {**p, "problem": re.sub(r"\d+[smhd] ago", "ago", p["problem"])} for p in doc["problems"]
    ]
    return doc


def write_docs(folder: Path, docs: dict[str, Any]) -> list[str]:
    """Each document as `folder/<name>.json`; their paths, in the order given."""
    folder.mkdir(exist_ok=True)
    for name, doc in docs.items():
        (folder / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")
    return [str(folder / f"{name}.json") for name in docs]


def merge(*files: str, ok: tuple[int, ...] = (0,)) -> tuple[Any, int]:
    """`cachetool merge FILES --json` (in this process): its document and exit code."""
    result = invoke("merge", *files, "--json")
    assert result.exit_code in ok, result.stderr
    return json.loads(result.stdout), result.exit_code


@pytest.mark.slow
def test_the_merge_of_four_shards_is_the_merge_of_the_whole(shards: dict[str, Any], tmp_path: Path) -> None:
    """`merge` of the 4 shards of `ls` and of `verify --deep` says exactly what the merge of the
    unsharded documents says: hosts, totals, leftovers, problems (and exits the same); only what it
    says of its input files differs, and the shard set is complete, also when each shard ran on
    another node (an array's tasks on one shared file system)."""
    whole_files = write_docs(tmp_path / "whole", {"ls": shards["ls"], "verify": shards["verify"]})
    parts = {f"ls-{i}": d for i, d in enumerate(shards["ls_shards"])}
    parts |= {f"verify-{i}": d for i, d in enumerate(shards["verify_shards"])}
    whole, code = merge(*whole_files, ok=(0, 1))
    sharded, sharded_code = merge(*write_docs(tmp_path / "parts", parts), ok=(0, 1))
    assert sharded_code == code
    assert about_caches(sharded) == about_caches(whole)
    assert [s["missing"] + s["repeated"] for s in sharded["shard_sets"]] == [[], []]
    assert whole["leftovers"] and whole["totals"] == shards["ls"]["totals"]
    # the tasks of an array run on many nodes of one shared file system: still one set per root
    spread = {name: {**doc, "host": f"node-{i % 4}"} for i, (name, doc) in enumerate(parts.items())}
    across, _ = merge(*write_docs(tmp_path / "spread", spread), ok=(0, 1))
    assert [(s["hosts"], s["complete"]) for s in across["shard_sets"]] == [
        ([f"node-{i}" for i in range(4)], True)
    ] * 2
    assert across["totals"] == whole["totals"] and across["duplicates"] == []


@pytest.mark.slow
def test_a_missing_or_repeated_shard_is_reported_not_merged(shards: dict[str, Any], tmp_path: Path) -> None:
    """Shards 0, 1, 1 and 3 of 4: merge says shard 2/4 is missing and 1/4 was given twice (counted
    once), and exits 1."""
    ls = shards["ls_shards"]
    files = write_docs(tmp_path, {"a": ls[0], "b": ls[1], "c": ls[1], "d": ls[3]})
    doc, _ = merge(*files, ok=(1,))
    (shard_set,) = doc["shard_sets"]
    assert shard_set["missing"] == [2] and shard_set["repeated"] == [1]
    counted = sum(h["entries"] for h in doc["hosts"])
    assert counted == len(ls[0]["entries"]) + len(ls[1]["entries"]) + len(ls[3]["entries"])
    human = invoke("merge", *files, columns=100)
    assert human.exit_code == 1
    text = " ".join(human.stdout.split())
    assert "missing shard 2/4" in text and "shard 1/4 given twice" in text, human.stdout


@pytest.mark.slow
def test_a_whole_listing_merged_with_its_shards_is_counted_once(
    shards: dict[str, Any], tmp_path: Path
) -> None:
    """The whole `ls` of a cache merged with its 4 shards: the listings of different counts do
    not make one set (exit 1, said so), and what is counted is the complete listing, once: the
    entries, files and bytes of the whole, not twice as many; the line says "1 of 1 shard(s)"
    (it said "5 of 1/4 shard(s)")."""
    parts = {"whole": shards["ls"]} | {f"ls-{i}": d for i, d in enumerate(shards["ls_shards"])}
    files = write_docs(tmp_path, parts)
    doc, _ = merge(*files, ok=(1,))
    assert doc["totals"] == shards["ls"]["totals"]
    assert sum(h["entries"] for h in doc["hosts"]) == len(shards["ls"]["entries"])
    text = " ".join(invoke("merge", *files, columns=100).stdout.split())
    assert "1 of 1 shard(s)" in text and "do not make one set" in text and " of 1/4 " not in text, text


@pytest.mark.slow
def test_merge_tells_hosts_apart(copy: Path, tmp_path: Path) -> None:
    """The same cache copied to node-7 and listed there (its own UTS and PID namespaces): merge
    names both hosts, lists every fingerprint both hold as a duplicate across hosts, each host's
    leftovers, and a step made from the same parent by the same operation whose result differs on
    node-7."""
    import shutil
    import socket

    other = tmp_path / "node7"
    other.mkdir()
    copy_cache(copy / "cache", other / "cache")
    shutil.copytree(copy / "tmp", other / "tmp")
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to simulate a second host")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    node7 = ["unshare", *user, "--pid", "--uts", "--fork", "--mount-proc"]
    node7 += ["sh", "-c", 'hostname "$0" && exec "$@"', "node-7"]
    here, there = cachetool_json(copy, "ls"), cachetool_json(other, "ls", host=node7)
    assert there["host"] == "node-7" and here["host"] == socket.gethostname()
    step = next(e for e in there["entries"] if e["parent"] and e["operation"])
    step["fingerprint"] = step["id"] = "00ff00ff00ff00ff"  # what node-7 computed differs
    doc, _ = merge(*write_docs(tmp_path, {"here": here, "there": there}))
    assert sorted(h["host"] for h in doc["hosts"]) == sorted([here["host"], "node-7"])
    both = {e["fingerprint"] for e in here["entries"]} & {e["fingerprint"] for e in there["entries"]}
    both.discard(None)
    assert {d["fingerprint"] for d in doc["duplicates"]} == both and both
    assert all(d["hosts"] == sorted([here["host"], "node-7"]) for d in doc["duplicates"])
    assert {x["host"] for x in doc["leftovers"]} == {here["host"], "node-7"}
    (differs,) = doc["differing_steps"]
    assert (differs["parent"], differs["operation"]) == (step["parent"], step["operation"])
    assert differs["fingerprints"]["node-7"] == ["00ff00ff00ff00ff"]


@pytest.mark.parametrize(
    "text",
    [
        "no JSON at all",
        '{"version": 2, "root": "/c", "entries": [], "totals": {}}',
        '{"version": 1, "root": "/c", "fingerprints": []}',
        "[1, 2]",
    ],
)
def test_merge_refuses_a_file_that_is_not_a_cachetool_document(tmp_path: Path, text: str) -> None:
    """Not JSON, a document of an unknown version, another command's document: one `Error:` line
    naming the file, exit 2."""
    good = tmp_path / "good.json"
    good.write_text('{"version": 1, "root": "/c", "host": "h", "shard": null, "entries": [], "totals": {}}')
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    result = invoke("merge", str(good), str(bad))
    assert result.exit_code == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {bad}: "), result.stderr


def test_merge_of_a_remote_listing_says_it_is_one(tmp_path: Path) -> None:
    """`cachetool ls s3://... --json > r.json; cachetool merge r.json`: the error says the file is
    a remote's listing, which merge does not join (it joins local caches' documents), not that
    it is no document of `cachetool ls --json`."""
    remote = tmp_path / "r.json"
    remote.write_text('{"version": 1, "remote": "s3://team/hf", "entries": []}')
    result = invoke("merge", str(remote))
    assert result.exit_code == 2, result.stdout
    assert result.stderr == (
        f"Error: {remote}: a document of the remote s3://team/hf: merge joins the documents of "
        "local caches (`cachetool ls --json`, `cachetool verify --json`)\n"
    )
