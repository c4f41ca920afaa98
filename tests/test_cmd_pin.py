"""`cachetool pin` / `unpin`: pins are listed, marked, filtered, and keep their entry and its
recorded ancestors from gc."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke
from tests.test_cmd_gc import cli, gc_json


@pytest.mark.slow
def test_pins_and_their_recorded_ancestors_survive(copy: Path, leftovers: dict[str, Any]) -> None:
    """`cachetool pin` keeps an entry and the ancestors the ledger recorded for it; --keep keeps
    one more; unpin releases them."""
    cache = copy / "cache"
    b, a = leftovers["chain_b"], leftovers["chain_a"]
    res = cli("pin", b[:8], "--cache-dir", str(cache))
    assert res.exit_code == 0 and b in res.stdout
    assert json.loads((cache / ".cachetool" / "pins.json").read_text())["pins"].keys() == {b}
    _, doc = gc_json(copy, "--max-size", "0", "--min-age", "0", "--keep", leftovers["derived"], "--dry-run")
    planned = {i["fingerprint"] for i in doc["plan"]["items"]}
    assert {a, b, leftovers["derived"]}.isdisjoint(planned)
    assert {leftovers["indices"], leftovers["shards"], leftovers["train"], leftovers["test"]} <= planned
    reasons = doc["plan"]["kept"]["reasons"]
    # Ancestors of chain_b: chain_a, the source split, and the saved copy of the source (same fingerprint).
    assert (reasons["pinned"], reasons["ancestors of pinned entries"], reasons["kept by --keep"]) == (1, 3, 1)
    skipped = {s["fingerprint"]: s["reason"] for s in doc["plan"]["skipped"]}
    assert skipped[b].startswith("pinned") and skipped[a] == f"ancestor of pinned {b}"
    assert cli("unpin", b, "--cache-dir", str(cache)).exit_code == 0
    assert cli("unpin", b, "--cache-dir", str(cache)).exit_code == 2
    assert cli("pin", "ffffffffffff", "--cache-dir", str(cache)).exit_code == 2
    _, doc = gc_json(copy, "--max-size", "0", "--min-age", "0", "--dry-run")
    assert {a, b} <= {i["fingerprint"] for i in doc["plan"]["items"]}


@pytest.mark.slow
def test_gc_evicts_nothing_when_the_ledger_could_not_be_read_whole(
    copy: Path, leftovers: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger segment larger than readers read of one (256 MB; lowered here to 1 kB): the
    recorded ancestors of a pinned entry may be in what was not read, so `gc --max-size` evicts
    nothing (one `Error:` line, exit 2) where it would have chosen them; `gc --temp` still runs."""
    from cachetool.history import ledger

    cache = copy / "cache"
    b, a = leftovers["chain_b"], leftovers["chain_a"]
    assert cli("pin", b[:8], "--cache-dir", str(cache)).exit_code == 0
    monkeypatch.setattr(ledger, "MAX_SEGMENT_BYTES", 1024)
    res = cli("gc", "--cache-dir", str(cache), "--max-size", "0", "--min-age", "0", "--dry-run")
    assert res.exit_code == 2, res.stdout + res.stderr
    assert a not in res.stdout
    assert res.stderr.startswith(f"Error: the ledger of {cache} could not be read whole"), res.stderr
    assert "gc evicts nothing" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert cli("gc", "--cache-dir", str(cache), "--temp", "--min-age", "0", "--dry-run").exit_code == 0


@pytest.mark.slow
def test_pins_are_listed_marked_and_filtered(golden: dict[str, Any]) -> None:
    """`pin --list` (human, --json, -q) lists the pins; `ls` and `show` mark pinned entries;
    `ls --filter pinned=yes` keeps only them. (On this worker's golden cache, unpinned at the end:
    the real cache is shared by every worker and only read.)"""
    cache = golden["cache"]
    (source,) = json.loads(invoke("ls", cache, "--json", "--filter", "kind=source").stdout)["entries"]
    fp = source["fingerprint"]
    assert invoke("pin", "--list", "--cache-dir", cache).stdout.startswith("No pins in ")
    assert invoke("pin", fp, "--cache-dir", cache).exit_code == 0
    try:
        assert invoke("pin", "--list", "-q", "--cache-dir", cache).stdout == f"{fp}\n"
        doc = json.loads(invoke("pin", "--list", "--json", "--cache-dir", cache).stdout)
        assert list(doc) == ["version", "root", "pins"]
        (pin,) = doc["pins"]
        assert (pin["fingerprint"], pin["kind"], pin["path"]) == (fp, "source", pin["path"])
        assert pin["size"] > 0 and pin["time"].endswith("+00:00")
        human = invoke("pin", "--list", "--cache-dir", cache).stdout
        assert fp in human and "source" in human
        assert invoke("ls", cache, "-q", "--filter", "pinned=yes").stdout == f"{fp}\n"
        assert fp not in invoke("ls", cache, "-q", "--filter", "pinned=no").stdout
        listing = json.loads(invoke("ls", cache, "--json").stdout)["entries"]
        assert [e["fingerprint"] for e in listing if e["pinned"]] == [fp]
        table = invoke("ls", cache).stdout
        row = next(line for line in table.splitlines() if line.split()[:2] == ["source", fp])
        assert " yes " in row and "pin" in table
        shown = invoke("show", fp, "--cache-dir", cache).stdout
        assert "pinned" in shown and "gc never evicts it" in shown
        assert json.loads(invoke("show", fp, "--cache-dir", cache, "--json").stdout)["pinned"] is True
    finally:
        invoke("unpin", fp, "--cache-dir", cache)
    assert invoke("ls", cache, "-q", "--filter", "pinned=yes").stdout == ""


@pytest.mark.slow
def test_an_entry_without_a_fingerprint_is_named_as_such(real_cache: dict[str, Any]) -> None:
    """`pin`, `lineage` and `explain` of the path of a lock `load_dataset` left (an entry `ls`
    lists, without a fingerprint) say that it has none (exit 2), not "no cache entry matches"."""
    lock = next(Path(real_cache["cache"]).rglob("*_builder.lock"))
    for command in ("pin", "lineage", "explain"):
        said = invoke(command, str(lock), "--cache-dir", real_cache["cache"])
        assert said.exit_code == 2, (command, said.output)
        assert said.stderr == f"Error: {lock} is a lock entry: it has no fingerprint\n", command


@pytest.mark.slow
def test_gc_refuses_to_evict_from_a_folder_whose_pins_live_in_another(
    copy: Path, leftovers: dict[str, Any]
) -> None:
    """An entry pinned in a cache root; `gc --max-size` given a folder inside that root (a
    dataset's folder) or one that holds it (HF_HOME above `datasets/`) refuses to evict (exit
    2), naming the root whose pins and recorded ancestors it would not read and the `--cache-dir`
    to give. It planned to evict the pinned entry: pins live in the root's `.cachetool/`."""
    cache = copy / "cache"
    b = leftovers["chain_b"]
    assert cli("pin", b, "--cache-dir", str(cache)).exit_code == 0
    inside = copy / leftovers["csv_dir"]
    assert any(inside.glob(f"cache-{b}*.arrow"))
    for where, how in (
        (inside, f"it is inside the cache root {cache}"),
        (copy, f"it holds the cache root {cache}"),
    ):
        res = cli("gc", "--cache-dir", str(where), "--max-size", "0", "--min-age", "0", "--dry-run")
        assert res.exit_code == 2, res.stdout + res.stderr
        assert res.stderr.startswith(f"Error: refusing to evict from {where}: {how}"), res.stderr
        assert f"--cache-dir {cache}" in res.stderr, res.stderr
    _, doc = gc_json(copy, "--max-size", "0", "--min-age", "0", "--dry-run")
    assert b not in {i["fingerprint"] for i in doc["plan"]["items"]}


@pytest.mark.slow
def test_a_folder_inside_a_cache_root_lists_the_root_s_pins(copy: Path, leftovers: dict[str, Any]) -> None:
    """`ls --cache-dir` and `show --cache-dir` given a dataset's folder inside a cache root mark an
    entry pinned in that root as pinned (`ls --filter pinned=yes` finds it): the pins are the
    root's. They said it was not pinned."""
    cache = copy / "cache"
    b = leftovers["chain_b"]
    assert cli("pin", b, "--cache-dir", str(cache)).exit_code == 0
    inside = str(copy / leftovers["csv_dir"])
    assert invoke("ls", "--cache-dir", inside, "-q", "--filter", "pinned=yes").stdout == f"{b}\n"
    assert json.loads(invoke("show", b, "--cache-dir", inside, "--json").stdout)["pinned"] is True
