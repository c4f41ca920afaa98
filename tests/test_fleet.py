"""A fleet view: `ls` and `verify` split into `--shard i/n` jobs (one or many hosts), and
`cachetool merge` joining their `--json` documents into one report.

The cache is the leftovers cache (complete entries, a traced chain with its parents recorded in
the ledger, saved datasets, and the leftovers of killed processes). Another host is a real process
in its own UTS and PID namespaces (`unshare`, host name `node-7`), as in tests/test_hosts.py.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import hf_env, invoke

CACHETOOL = [sys.executable, "-m", "cachetool"]


def cachetool_json(base: Path, *args: str, ok: tuple[int, ...] = (0,), host: list[str] = ()) -> Any:  # type: ignore[assignment]
    """`cachetool ARGS --json` in a process of its own (on another host with `host`); its document."""
    proc = subprocess.run(
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


@pytest.fixture
def shards(copy: Path) -> dict[str, Any]:
    """`ls --json` and `verify --deep --json` of the leftovers cache, whole and in 4 shards."""
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
