"""A warm `ls --json` (the read index written by the listing before) lists what a listing that
reads every file lists, after any change: a file touched, rewritten in place, replaced by another
of the same size and mtime, added or removed; a pin added or removed; a ledger record."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cachetool.cache.pins import add_pin, read_pins, remove_pin
from cachetool.cache.scan import scan_cache
from cachetool.cli.ls import live_in, ls_document_text, recorded_usage
from tests.attack.races import synthesize_cache
from tests.conftest import invoke


def _ls(root: Path) -> str:
    got = invoke("ls", str(root), "--json")
    assert got.exit_code == 0, got.output
    return str(got.stdout)


def _read_whole(root: Path) -> str:
    """What `ls --json` writes, from a scan that reads every file (no read index)."""
    report = scan_cache(root, use_index=False, usage=recorded_usage(root), liveness=live_in)
    return "".join(ls_document_text(report, report.entries, frozenset(read_pins(root)))) + "\n"


@pytest.fixture
def cache(isolated_env: Path) -> tuple[Path, list[Path]]:
    """A cache listed twice (cold: the read index is written; warm: it is used)."""
    root = isolated_env / "cache"
    files = synthesize_cache(root, 6)
    assert _ls(root) == _read_whole(root)
    assert _ls(root) == _read_whole(root)
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


def _ledger_record(root: Path, fp: str) -> None:
    from cachetool.history.writer import LedgerWriter
    from tests.test_ledger import _record

    w = LedgerWriter(warn=lambda _: None)
    w.append(str(root), _record(0, fp))
    w.close()


CHANGES: dict[str, Callable[[Path, list[Path]], None]] = {
    "touched": lambda root, files: os.utime(files[0], (1_000_000_000, 1_000_000_000)),
    "replaced, same size and mtime, another inode": lambda root, files: _replace_keeping_size_and_mtime(
        files[0], files[1]
    ),
    "rewritten in place, same size and mtime": lambda root, files: _rewrite_in_place(
        files[0], files[0].read_bytes().replace(b"0000000000000000", b"00000000000000ab")
    ),
    "added": lambda root, files: (files[0].parent / "cache-00000000000000aa.arrow").write_bytes(
        files[0].read_bytes().replace(b"0000000000000000", b"00000000000000aa")
    ),
    "removed": lambda root, files: files[2].unlink(),
    "pin added": lambda root, files: add_pin(root, "0000000000000003") and None,
    "ledger record added": lambda root, files: _ledger_record(root, "0000000000000004"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_is_listed(change: str, cache: tuple[Path, list[Path]]) -> None:
    """After each change, `ls --json` writes what a listing that reads every file writes, which
    differs from the listing before."""
    root, files = cache
    before = _ls(root)
    CHANGES[change](root, files)
    after = _ls(root)
    assert after == _read_whole(root)
    assert after != before
    if change == "ledger record added":
        assert '"operation": "map"' in after


def test_a_pin_removed_is_listed(cache: tuple[Path, list[Path]]) -> None:
    """A pin added (listed), then removed: the listing says the entry is no longer pinned."""
    root, _ = cache
    add_pin(root, "0000000000000003")
    pinned = _ls(root)
    assert '"pinned": true' in pinned
    remove_pin(root, "0000000000000003")
    assert _ls(root) == _read_whole(root) != pinned
    assert '"pinned": true' not in _ls(root)
