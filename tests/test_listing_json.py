"""`ls --json` with the read index present writes the bytes of the listing `list_cache` makes, on
real caches (every kind of entry, a traced pipeline with its ledger, the leftovers of killed
processes), on damaged and odd files, and under every `--filter`, `--sort` and `--limit` form."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cachetool.cache.pins import add_pin
from cachetool.cache.selection import read_listing
from cachetool.cli.ls import live_in, ls_document_text, recorded_usage
from cachetool.maintenance.liveness import InUse
from tests.attack.races import synthesize_cache
from tests.conftest import invoke

FORMS: list[list[str]] = [
    [],
    ["--limit", "0"],
    ["--limit", "1"],
    ["--limit", "3"],
    ["--limit", "100000"],
    ["--filter", "kind=derived"],
    ["--filter", "kind=leftover,indices"],
    ["--filter", "size>1KB", "--filter", "used<1d"],
    ["--filter", "modified>1h"],
    ["--filter", "rows<100"],
    ["--filter", "files>1"],
    ["--filter", "pinned=yes"],
    ["--filter", "pinned=no"],
    ["--filter", "content=indices"],
    ["--filter", "dataset=csv"],
    ["--filter", "split=train"],
    ["--filter", "fingerprint=0"],
    ["--sort", "size"],
    ["--sort", "size:asc"],
    ["--sort", "name"],
    ["--sort", "modified:asc"],
    ["--sort", "used"],
    ["--sort", "accessed:desc"],
    ["--sort", "rows"],
    ["--sort", "files"],
    ["--sort", "kind"],
    ["--sort", "size:asc", "--limit", "2"],
    ["--filter", "kind=derived", "--sort", "name", "--limit", "5"],
]


def _options(form: list[str]) -> dict[str, Any]:
    filters = [form[i + 1] for i, a in enumerate(form) if a == "--filter"]
    sort = next((form[i + 1] for i, a in enumerate(form) if a == "--sort"), None)
    limit = next((int(form[i + 1]) for i, a in enumerate(form) if a == "--limit"), None)
    return {"filter": filters, "sort": sort, "limit": limit}


def live_once() -> Callable[..., InUse]:
    """`live_in`, its pass over every process of the machine (what a listing takes when a file
    reads as cut short: 0.1 to 0.5 s of CPU, more processes more) made on the first call only,
    for a test whose processes leave the listed files alone: the object path then reads the same
    liveness for every form, as each `ls` reads its own."""
    taken: dict[Path, InUse] = {}

    def liveness(*, root: Path) -> InUse:
        if root not in taken:
            taken[root] = live_in(root=root)
        return taken[root]

    return liveness


def _object_path_text(root: Path, form: list[str], liveness: Callable[..., InUse] = live_in) -> str:
    """What `ls --json` writes in a pipe, from the listing that makes every `Entry`."""
    listing = read_listing(root, **_options(form), usage=recorded_usage(root), liveness=liveness)
    return "".join(ls_document_text(listing.report, listing.entries, listing.pinned)) + "\n"


def assert_warm_listing_is_the_listing(root: Path, forms: list[list[str]] = FORMS) -> None:
    read_listing(root)  # the read index, written
    liveness = live_once()
    for form in forms:
        got = invoke("ls", str(root), "--json", *form)
        assert got.exit_code == 0, (form, got.output)
        assert got.stdout == _object_path_text(root, form, liveness), form
    pin = next(e.fingerprint for e in read_listing(root).entries if e.fingerprint)
    add_pin(root, pin)
    for form in ([], ["--limit", "2"], ["--filter", "pinned=yes"]):
        got = invoke("ls", str(root), "--json", *form)
        assert got.stdout == _object_path_text(root, form, liveness), form
    assert f'"id": "{pin}"' in got.stdout


def _write_stream(path: Path, fingerprint: str | None, columns: dict[str, Any], eos: bool = True) -> None:
    import pyarrow as pa

    meta = {"info": {"features": {}}}
    if fingerprint is not None:
        meta["fingerprint"] = fingerprint  # type: ignore[assignment]
    batch = pa.record_batch(list(columns.values()), names=list(columns))
    schema = batch.schema.with_metadata({"huggingface": json.dumps(meta)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        w.write_batch(batch.replace_schema_metadata(schema.metadata))
    data = sink.getvalue().to_pybytes()
    path.write_bytes(data if eos else data[:-8])


def test_damaged_and_odd_files_list_the_bytes_of_the_listing(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Damaged, foreign, unfinished, shard, indices, link and oddly named files next to plain
    cache files, plain ones in a folder whose path JSON escapes; one file changed after the
    index was written: the bytes of the listing."""
    import pyarrow as pa

    root = isolated_env / "cache"
    files = synthesize_cache(root, 12)
    folder = files[0].parent
    data = files[1].read_bytes()
    files[1].write_bytes(data[: len(data) // 2])  # truncated
    files[2].write_bytes(b"\xff" * 100)  # garbage
    files[3].write_bytes(b"")  # empty
    _write_stream(folder / "cache-00000000000000f1.arrow", "ffffffffffffffff", {"id": pa.array([1])})
    _write_stream(folder / "cache-00000000000000f2.arrow", None, {"id": pa.array([1, 2])})
    unfinished = folder / "cache-00000000000000f3.arrow"
    _write_stream(unfinished, "00000000000000f3", {"id": pa.array([1])}, eos=False)
    idx = {"indices": pa.array([2, 0], pa.uint64())}
    _write_stream(folder / "cache-00000000000000f4.arrow", "00000000000000f4", idx)
    _write_stream(folder / "cache-00000000000000f5.arrow", "00000000000000f5", {})  # no columns
    for rank in range(2):
        fp = f"00000000000000f6_{rank:05d}_of_00002"
        _write_stream(folder / f"cache-{fp}.arrow", fp, {"id": pa.array([rank])})
    _write_stream(folder / "cache-héllo.arrow", "héllo", {"id": pa.array([1])})
    _write_stream(folder / 'cache-"q"\\x.arrow', None, {"id": pa.array([1])})
    _write_stream(folder / "cache-a-b.arrow", "a-b", {"id": pa.array([1])})
    os.symlink(files[4].name, folder / "cache-00000000000000f7.arrow")
    (folder / "cache-00000000000000f8.arrow").mkdir()
    other = root / 'dé"jà\\ vu→'  # a folder whose path JSON escapes
    other.mkdir()
    _write_stream(other / "cache-00000000000000f9.arrow", "00000000000000f9", {"id": pa.array([1])})
    _write_stream(root / "cache-00000000000000fa.arrow", "00000000000000fa", {"text": pa.array(["x"])})
    (root / "notes.txt").write_text("x")
    read_listing(root)  # the index knows every file as it is now; then one changes
    _write_stream(files[5], f"{5:016x}", {"id": pa.array([7, 8, 9])})
    assert_warm_listing_is_the_listing(root)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["real_cache", "golden", "leftovers"])
def test_real_caches_list_the_bytes_of_the_listing(
    which: str, request: pytest.FixtureRequest, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache with every kind of entry, the traced golden pipeline (its ledger gives entries
    a parent and an operation) and the leftovers of killed processes: `ls --json` writes the
    bytes of `list_cache`'s listing, under every option form."""
    made = request.getfixturevalue(which)
    src = Path(made["cache"]) if which != "leftovers" else Path(made["base"]) / "cache"
    root = isolated_env / "copy"
    shutil.copytree(src, root, symlinks=True)
    import pyarrow as pa

    # One file no ledger records, next to the pipeline's (which the golden ledger records all).
    folder = min(root.rglob("cache-*.arrow")).parent
    _write_stream(folder / "cache-00000000000000ee.arrow", "00000000000000ee", {"id": pa.array([1])})
    assert_warm_listing_is_the_listing(root)
    if which == "golden":
        assert '"operation": "map"' in invoke("ls", str(root), "--json").stdout


def test_cache_files_of_several_folders_in_one_group_list_in_path_order(isolated_env: Path) -> None:
    """Cache files outside any dataset folder (one group) in the root and in the folders `a`
    and `a-b`: the walk meets them root, `a`, `a-b`, but the listing orders them by path text
    (`a-b/` before `a/` before the root's `cache-`)."""
    import pyarrow as pa

    root = isolated_env / "cache"
    for i, folder in enumerate([root, root / "a", root / "a-b"]):
        folder.mkdir(parents=True, exist_ok=True)
        for j in range(2):
            fp = f"{i:08x}{j:08x}"
            _write_stream(folder / f"cache-{fp}.arrow", fp, {"id": pa.array([i, j])})
    assert_warm_listing_is_the_listing(root, [[], ["--limit", "3"]])
    listed = json.loads(invoke("ls", str(root), "--json").stdout)
    paths = [e["path"] for e in listed["entries"]]
    assert paths == sorted(paths) and "/a-b/" in paths[0], paths


def test_a_ledger_only_in_the_per_user_fallback_still_gives_entries_their_lineage(isolated_env: Path) -> None:
    """A root whose `.cachetool` cannot be created keeps its ledger in the per-user fallback:
    `ls --json` still shows what it records (the listing looks there once the per-user
    `ledgers` folder exists)."""
    import pyarrow as pa

    from cachetool.history.writer import LedgerWriter
    from tests.test_ledger import _record

    root = isolated_env / "cache"
    root.mkdir()
    fp = "00000000000000c1"
    _write_stream(root / f"cache-{fp}.arrow", fp, {"id": pa.array([1])})
    (root / ".cachetool").write_text("in the way")
    before = json.loads(invoke("ls", str(root), "--json").stdout)["entries"]
    assert [e["operation"] for e in before] == [None]
    w = LedgerWriter(warn=lambda _: None)
    w.append(str(root), _record(0, fp))
    w.close()
    after = json.loads(invoke("ls", str(root), "--json").stdout)["entries"]
    assert [e["operation"] for e in after] == ["map"]


@pytest.mark.slow
def test_a_plain_listing_imports_no_hashing_where_no_per_user_ledger_exists(isolated_env: Path) -> None:
    """Start-up: a root without a ledger, and no per-user `ledgers` folder, is listed without
    importing `hashlib` (OpenSSL) or `tempfile`. The `ls` command is called as the Typer app calls
    it, without the app: Typer's option parsing (pydantic) imports both."""
    import subprocess
    import sys

    root = isolated_env / "cache"
    root.mkdir()
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from cachetool.cli.common import invoke, params_of\n"
        "from cachetool.cli.ls import ls_command\n"
        "values = {name: p.default for name, p in params_of(ls_command).items()}\n"
        "invoke(ls_command, {**values, 'path': Path(sys.argv[1]), 'as_json': True})\n"
        "print(sorted(m for m in ('hashlib', 'tempfile') if m in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["entries"] == [], done.stdout
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr
