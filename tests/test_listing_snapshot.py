"""A plain `ls --json` of an unchanged cache writes the text kept from the listing before
(`cachetool.cache.snapshot`): the same bytes as a listing that makes every `Entry`, and never
the kept text once anything it depends on changed (a file touched, rewritten in place, replaced
by another of the same size and mtime, added or removed; a pin; a ledger record; an older
format), nor kept at all where a listing's text depends on more than its files."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cachetool.cache.dirs import derived_dir
from cachetool.cache.pins import add_pin, remove_pin
from cachetool.cache.snapshot import SNAPSHOT_NAME, ListingText
from tests.attack.races import synthesize_cache
from tests.conftest import invoke
from tests.test_listing_lean import _object_path_text


def _text_path(root: Path) -> Path:
    """Where the listing text of `root` is kept: the user's cache folder, never the root."""
    folder = derived_dir(root)
    assert folder is not None
    return folder / SNAPSHOT_NAME


def _ls(root: Path) -> str:
    got = invoke("ls", str(root), "--json")
    assert got.exit_code == 0, got.output
    return str(got.stdout)


def _kept(root: Path) -> str | None:
    """The kept text a listing of `root` would write now, or None."""
    snap = ListingText.of(root)
    return None if snap is None or snap.text is None else b"".join(snap.pieces()).decode("ascii")


@pytest.fixture
def cache(isolated_env: Path) -> tuple[Path, list[Path]]:
    """A cache listed twice (the read index, then the kept text), each listing checked."""
    root = isolated_env / "cache"
    files = synthesize_cache(root, 6)
    assert _ls(root) == _object_path_text(root, [])  # cold: the read index is written
    assert _kept(root) is None
    assert _ls(root) == _object_path_text(root, [])  # warm: the text is kept
    assert _kept(root) == _ls(root)[:-1]  # and written again from there
    return root, files


def _replace_keeping_size_and_mtime(path: Path, other: Path) -> None:
    """`path` replaced (another inode) by `other`'s bytes (same size), its mtime and its
    folder's kept."""
    st = path.stat()
    folder = path.parent.stat()
    data = other.read_bytes()
    assert len(data) == st.st_size
    tmp = path.with_name("x.tmp")
    tmp.write_bytes(data)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, path)
    os.utime(path.parent, ns=(folder.st_atime_ns, folder.st_mtime_ns))


def _rewrite_in_place(path: Path, data: bytes) -> None:
    """`path` rewritten in place (same inode) with `data` of its size, its mtime set back."""
    st = path.stat()
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


CHANGES: dict[str, Callable[[Path, list[Path]], None]] = {
    "touched": lambda root, files: os.utime(files[0], (1_000_000_000, 1_000_000_000)),
    "replaced, same size and mtime, another inode": lambda root, files: _replace_keeping_size_and_mtime(
        files[0], files[1]
    ),
    "rewritten in place, same size and mtime": lambda root, files: _rewrite_in_place(
        files[0].parent / "dataset_info.json",
        (files[0].parent / "dataset_info.json").read_bytes().replace(b'"csv"', b'"tsv"'),
    ),
    "added": lambda root, files: (files[0].parent / "cache-00000000000000aa.arrow").write_bytes(
        files[0].read_bytes().replace(b"0000000000000000", b"00000000000000aa")
    ),
    "removed": lambda root, files: files[2].unlink(),
    "pin added": lambda root, files: add_pin(root, "0000000000000003") and None,
    "ledger record added": lambda root, files: _ledger_record(root, "0000000000000004"),
    "older format": lambda root, files: _older_format(root),
    "damaged": lambda root, files: _truncate(_text_path(root)),
}


def _ledger_record(root: Path, fp: str) -> None:
    from cachetool.history.writer import LedgerWriter
    from tests.test_ledger import _record

    w = LedgerWriter(warn=lambda _: None)
    w.append(str(root), _record(0, fp))
    w.close()


def _older_format(root: Path) -> None:
    path = _text_path(root)
    data = path.read_bytes()
    path.write_bytes(data.replace(b"cachetool ls --json 1\n", b"cachetool ls --json 0\n", 1))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_is_listed_not_the_kept_text(change: str, cache: tuple[Path, list[Path]]) -> None:
    """After each change, the kept text is not used: `ls --json` writes what the listing that
    makes every `Entry` writes (which differs from the kept text where the change shows)."""
    root, files = cache
    before = _ls(root)
    CHANGES[change](root, files)
    assert _kept(root) is None, "the kept text would be written for a changed cache"
    after = _ls(root)
    assert after == _object_path_text(root, [])
    # (the dataset's name is its folder's, not that in dataset_info.json)
    if change not in ("older format", "damaged", "rewritten in place, same size and mtime"):
        assert after != before
    if change == "ledger record added":
        assert '"operation": "map"' in after


def test_a_pin_removed_is_listed_not_the_kept_text(cache: tuple[Path, list[Path]]) -> None:
    """A pin added (listed, kept again), then removed: the kept text of the pinned listing is not
    used for the unpinned one."""
    root, _ = cache
    add_pin(root, "0000000000000003")
    pinned = _ls(root)
    assert _kept(root) == pinned[:-1]
    remove_pin(root, "0000000000000003")
    assert _kept(root) is None
    assert _ls(root) == _object_path_text(root, []) != pinned


def test_locks_and_downloads_keep_the_text_and_each_change_of_them_is_seen(
    cache: tuple[Path, list[Path]],
) -> None:
    """The files every real cache holds beside its data (the locks `load_dataset` leaves, never
    deleted on Linux, in the root and beside each dataset folder; a remote file's download, its
    lock and metadata; an extracted archive) follow from the files alone: the text is kept, and
    a lock added or removed, a download completed, a file added deep in an extracted folder each
    make the listing again. (Nothing was kept beside a lock: no listing of a real cache used it.)"""
    root, files = cache
    folder = files[0].parent
    (folder.parent / f"{folder.name}_builder.lock").write_text("")
    (folder.parent / f"{folder.name}.incomplete_info.lock").write_text("")
    (root / (str(folder).replace("/", "_") + ".lock")).write_text("")
    downloads = root / "downloads"
    (downloads / "extracted" / ("e" * 64) / "data").mkdir(parents=True)
    (downloads / "extracted" / ("e" * 64) / "data" / "part-0.csv").write_text("x\n1\n")
    (downloads / "extracted" / (("e" * 64) + ".lock")).write_text("")
    sha = "d" * 64
    (downloads / sha).write_text("x\n1\n2\n")
    (downloads / f"{sha}.json").write_text('{"url": "https://example.org/d.csv", "etag": null}')
    (downloads / f"{sha}.lock").write_text("")

    def listed_twice() -> str:
        first = _ls(root)
        assert first == _object_path_text(root, [])
        assert _kept(root) == first[:-1]  # kept
        assert _ls(root) == first
        return first

    kinds = {e["kind"] for e in json.loads(listed_twice())["entries"]}
    assert {"lock", "download", "extracted"} <= kinds, kinds
    changes: list[Callable[[], object]] = [
        (folder.parent / f"{folder.name}_builder.lock").unlink,
        lambda: (root / "other.lock").write_text(""),
        lambda: (downloads / f"{sha}.incomplete").write_text("x"),  # a download under way: a problem
        (downloads / f"{sha}.incomplete").unlink,
        lambda: (downloads / "extracted" / ("e" * 64) / "data" / "part-1.csv").write_text("x\n"),
    ]
    for change in changes:
        change()
        assert _kept(root) is None
        if (downloads / f"{sha}.incomplete").exists():
            for _ in range(2):  # an entry with a problem: nothing kept
                assert _ls(root) == _object_path_text(root, [])
            assert _kept(root) is None
        else:
            listed_twice()


def test_a_pin_made_during_a_listing_is_not_kept_under_the_key_before_it(
    cache: tuple[Path, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cachetool pin` lands after the listing computed its key and before it read the pins: the
    listing says the entry is pinned (true then), and its text is not kept under the key of the
    pins before, so once the pin is removed the next listing says unpinned. (The text was kept
    and served after the unpin: `"pinned": true` for an entry gc may evict.)"""
    import cachetool.cache.listing as listing

    root, files = cache
    files[0].touch()  # the kept text no longer applies: this listing is made again
    fp = "0000000000000003"
    made = listing.list_cache_lean

    def pinned_meanwhile(*args: object, **kwargs: object) -> object:
        add_pin(root, fp)
        return made(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(listing, "list_cache_lean", pinned_meanwhile)
    during = json.loads(_ls(root))
    monkeypatch.setattr(listing, "list_cache_lean", made)
    assert [e["pinned"] for e in during["entries"] if e["fingerprint"] == fp] == [True]
    remove_pin(root, fp)
    after = _ls(root)
    assert [e["pinned"] for e in json.loads(after)["entries"] if e["fingerprint"] == fp] == [False]
    assert after == _object_path_text(root, [])


@pytest.mark.parametrize(
    "odd",
    ["a temporary file", "a damaged cache file", "a limit"],
)
def test_no_text_is_kept_where_the_listing_depends_on_more_than_its_files(
    odd: str, cache: tuple[Path, list[Path]]
) -> None:
    """Temporary files (whose entries depend on live processes and the clock), a file with a
    problem, and `--limit` listings: no text is kept, and every listing is as the object path
    writes it."""
    root, files = cache
    (_text_path(root)).unlink()
    folder = files[0].parent
    form: list[str] = []
    if odd == "a temporary file":
        (folder / "tmpabcd1234").write_bytes(files[0].read_bytes())
    elif odd == "a damaged cache file":
        files[3].write_bytes(b"\xff" * 100)
    else:
        form = ["--limit", "2"]
    for _ in range(2):
        got = invoke("ls", str(root), "--json", *form)
        assert got.stdout == _object_path_text(root, form)
    assert not (_text_path(root)).exists()


def test_the_kept_text_is_the_listing(cache: tuple[Path, list[Path]]) -> None:
    """The kept text, once written, is what the listing writes (read back whole), and a listing
    of the same cache reads it rather than listing again."""
    root, _ = cache
    kept = _kept(root)
    assert kept is not None
    doc = json.loads(kept)
    assert len(doc["entries"]) == 6
    assert _ls(root) == kept + "\n" == _object_path_text(root, [])


def test_a_kept_text_with_control_characters_is_not_written(cache: tuple[Path, list[Path]]) -> None:
    """A kept text (under the right key) holding an escape sequence is not written out: the
    listing is made again."""
    import zlib

    from cachetool.cache.snapshot import _MAGIC

    root, _ = cache
    path = _text_path(root)
    data = path.read_bytes()
    head = len(_MAGIC) + 32
    text = zlib.decompress(data[head:]).replace(b'"entries": [', b'"entries": [\x1b[2J', 1)
    path.write_bytes(data[:head] + zlib.compress(text))
    assert _kept(root) is None
    assert _ls(root) == _object_path_text(root, [])


@pytest.mark.parametrize("kept", ["held", "read twice"])
def test_a_kept_text_is_checked_whole_before_any_of_it_is_written(
    kept: str, cache: tuple[Path, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read in pieces of 64 bytes, held (small) or checked then read again (large): written whole
    and the same; with an escape sequence in its last piece, or cut short, none of it is written."""
    import zlib

    from cachetool.cache import snapshot

    root, _ = cache
    monkeypatch.setattr(snapshot, "_PIECE", 64)
    if kept == "read twice":
        monkeypatch.setattr(snapshot, "HOLD_BYTES", 100)
    expected = _object_path_text(root, [])
    snap = ListingText.of(root)
    assert snap is not None and isinstance(snap.text, list) == (kept == "held")
    assert _ls(root) == expected
    path = _text_path(root)
    data = path.read_bytes()
    head = len(snapshot._MAGIC) + 32
    text = zlib.decompress(data[head:])
    path.write_bytes(data[:head] + zlib.compress(text[:-2] + b"\x1b" + text[-2:]))
    assert _kept(root) is None
    assert _ls(root) == expected
    path.write_bytes(data[: len(data) - 3])
    assert _kept(root) is None
    assert _ls(root) == expected


def test_a_changed_cache_listed_partly_again_by_the_scan_is_listed_right(
    cache: tuple[Path, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where more files than `HOLD_FILES` were listed for the key, the scan lists the other
    folders itself: a changed cache is listed as the object path lists it, and kept again."""
    from cachetool.cache import snapshot

    root, files = cache
    monkeypatch.setattr(snapshot, "HOLD_FILES", 2)
    snap = ListingText.of(root)
    assert snap is not None and snap.text is not None
    os.utime(files[1], (1_000_000_000, 1_000_000_000))
    snap = ListingText.of(root)
    assert snap is not None and snap.text is None and 0 < len(snap.listed) < 5
    assert _ls(root) == _object_path_text(root, [])
    assert _kept(root) == _object_path_text(root, [])[:-1]


def test_a_cache_with_a_ledger_keeps_its_text_until_the_ledger_changes(
    cache: tuple[Path, list[Path]],
) -> None:
    """A traced cache (a ledger beside it) keeps its text too: the key holds every file of the
    ledger's folders, so a record appended to a segment (a run still going) is listed, not the
    text kept before it."""
    from cachetool.history.writer import LedgerWriter
    from tests.test_ledger import _record

    root, _ = cache
    w = LedgerWriter(warn=lambda _: None)
    try:
        w.append(str(root), _record(0, "0000000000000004"))
        first = _ls(root)
        assert first == _object_path_text(root, []) and '"operation": "map"' in first
        assert _ls(root) == first
        assert _kept(root) == first[:-1], "no text kept for a cache with a ledger"
        w.append(str(root), _record(1, "0000000000000005"))
        assert _kept(root) is None
        after = _ls(root)
        assert after == _object_path_text(root, []) != first
    finally:
        w.close()
