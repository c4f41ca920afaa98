"""A plain `cachetool ls` (human table, `-q`) with the read index present writes what
`render_human` draws of `list_cache`'s listing, at every width, piped and on a terminal, with
`--limit` and `--no-truncate`, with pins, on real caches (every kind of entry, a traced pipeline
with its ledger) and on damaged and odd files."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cachetool.cache.pins import add_pin
from cachetool.cache.selection import read_listing
from cachetool.cli.ls import live_in, recorded_usage, render_human
from cachetool.cli.output import Output, OutputFormat
from cachetool.maintenance.liveness import InUse
from tests.attack.races import synthesize_cache
from tests.conftest import invoke
from tests.test_listing_json import _write_stream, live_once

#: (arguments of `cachetool ls`, terminal width, whether stdout is a terminal for Rich)
FORMS: list[tuple[list[str], int, bool]] = [
    ([], 120, False),
    ([], 80, False),
    ([], 60, False),
    ([], 40, False),
    ([], 200, False),
    (["--limit", "0"], 120, False),
    (["--limit", "1"], 120, False),
    (["--limit", "3"], 80, False),
    (["--limit", "100000"], 120, False),
    (["--no-truncate"], 60, False),
    (["--no-truncate", "--limit", "2"], 120, False),
    (["-q"], 120, False),
    (["--format", "quiet", "--limit", "2"], 120, False),
    ([], 120, True),
    ([], 70, True),
    (["--limit", "2"], 80, True),
    (["--no-truncate"], 50, True),
]
#: The forms tried on large real caches and once an entry is pinned.
FEW_FORMS = [FORMS[i] for i in (0, 3, 7, 9, 11, 14)]


def _object_path_text(
    root: Path, args: list[str], capsys: pytest.CaptureFixture[str], liveness: Callable[..., InUse] = live_in
) -> str:
    """What `ls ARGS` writes, from the listing that makes every `Entry`."""
    limit = int(args[args.index("--limit") + 1]) if "--limit" in args else None
    listing = read_listing(root, limit=limit, usage=recorded_usage(root), liveness=liveness)
    capsys.readouterr()
    if "-q" in args or "quiet" in args:
        Output(OutputFormat.quiet).ids(e.id for e in listing.entries)
    else:
        out = Output(OutputFormat.human, no_truncate="--no-truncate" in args)
        render_human(out, listing.report, listing.entries, pinned=listing.pinned)
    return capsys.readouterr().out


def assert_human_is_the_listing(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    forms: list[tuple[list[str], int, bool]] = FORMS,
) -> None:
    """Every form of `forms`, then `FEW_FORMS` with one entry pinned: the same bytes both
    ways, at one clock (ages count from the scan's time)."""
    read_listing(root)  # the read index, written
    liveness = live_once()
    now = time.time()
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: now)
        pin = next(e.fingerprint for e in read_listing(root).entries if e.fingerprint)
        for pinned in (False, True):
            if pinned:
                add_pin(root, pin)
            for args, width, terminal in FEW_FORMS if pinned else forms:
                m.setenv("COLUMNS", str(width))
                m.setenv("TTY_COMPATIBLE", "1" if terminal else "0")
                got = invoke("ls", str(root), *args, columns=width)
                assert got.exit_code == 0, (args, got.output)
                assert got.stdout == _object_path_text(root, args, capsys, liveness), (args, width, terminal)
        m.setenv("TTY_COMPATIBLE", "0")
        lines = [line.split()[:3] for line in invoke("ls", str(root)).stdout.splitlines()]
        assert ["kind", "fingerprint", "pin"] in lines  # the pin showed


def test_damaged_and_odd_files_list_the_bytes_of_the_listing(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Damaged, foreign, unfinished, shard, indices, link and oddly named files (long names,
    control characters, wide characters) next to plain cache files, plain ones in a folder whose
    name has control and wide characters and at the cache root, different row counts, sizes and
    ages, one file changed after the index was written: the same table and ids both ways."""
    import pyarrow as pa

    root = isolated_env / "cache"
    files = synthesize_cache(root, 12)
    folder = files[0].parent
    data = files[1].read_bytes()
    files[1].write_bytes(data[: len(data) // 2])  # truncated
    files[2].write_bytes(b"\xff" * 100)  # garbage
    _write_stream(folder / "cache-00000000000000f1.arrow", "ffffffffffffffff", {"id": pa.array([1])})
    _write_stream(folder / "cache-00000000000000f2.arrow", None, {"id": pa.array(range(1234))})
    _write_stream(
        folder / "cache-00000000000000f3.arrow", "00000000000000f3", {"id": pa.array([1])}, eos=False
    )
    idx = {"indices": pa.array([2, 0], pa.uint64())}
    _write_stream(folder / "cache-00000000000000f4.arrow", "00000000000000f4", idx)
    _write_stream(folder / "cache-00000000000000f5.arrow", "00000000000000f5", {})  # no columns
    for rank in range(2):
        fp = f"00000000000000f6_{rank:05d}_of_00003"  # a shard set missing one
        _write_stream(folder / f"cache-{fp}.arrow", fp, {"id": pa.array([rank])})
    long_fp = "0123456789abcdef" * 4  # the longest fingerprint a name holds: the column widens
    _write_stream(folder / f"cache-{long_fp}.arrow", long_fp, {"id": pa.array(range(12345))})
    _write_stream(folder / "cache-数据.arrow", "数据", {"id": pa.array([1])})
    _write_stream(folder / "cache-a\x1bb.arrow", "a\x1bb", {"id": pa.array([1])})
    _write_stream(folder / f"{'9' * 40}-a-rather-long-name.arrow", None, {"x": pa.array([1.5])})
    _write_stream(folder / os.fsdecode(b"x\xffy.arrow"), None, {"id": pa.array([1])})  # not UTF-8
    os.symlink(files[4].name, folder / "cache-00000000000000f7.arrow")
    (folder / "cache-00000000000000f8.arrow").mkdir()
    other = root / "dé\x1bjà 数据"  # a folder whose name is escaped and wide
    other.mkdir()
    _write_stream(other / "cache-00000000000000f9.arrow", "00000000000000f9", {"id": pa.array([1])})
    _write_stream(root / "cache-00000000000000fa.arrow", "00000000000000fa", {"text": pa.array(["x"])})
    for i, path in enumerate([*folder.glob("cache-*f[0-9a].arrow"), *other.iterdir()]):
        if not path.is_symlink():
            t = time.time() - 7 * 86400 * i  # ages in days, weeks, months
            os.utime(path, (t, t))
    read_listing(root)  # the index knows every file as it is now; then one changes
    _write_stream(files[5], f"{5:016x}", {"id": pa.array([7, 8, 9])})
    assert_human_is_the_listing(root, monkeypatch, capsys)


def test_an_empty_folder_lists_the_same_both_ways(
    isolated_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No entries at all: `No entries.` and the totals, or nothing with `-q`, either way."""
    root = isolated_env / "empty"
    root.mkdir()
    for args in ([], ["-q"], ["--limit", "0"]):
        assert invoke("ls", str(root), *args).stdout == _object_path_text(root, args, capsys)


def test_tables_laid_out_from_columns_are_those_laid_out_from_rows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`Output.table` given cells column by column (how a listing draws its tables) writes what it
    writes given the same cells as rows: cut and padded cells, wide characters, markup-like text, control
    characters and tabs, tables too wide for the width, piped and on a terminal."""
    import random

    rng = random.Random(11)
    words = [
        "derived",
        "[bold]x[/]",
        "héllo",
        "数据集",
        "",
        "0123456789abcdef0123",
        "a\x1bb",
        "t\tab",
        "1,234",
    ]
    columns = [("kind", "left"), ("fingerprint", "left"), ("files", "right"), ("rows", "right")]
    widths = {"kind": (10, 18), "fingerprint": (16, 16)}
    for terminal in (False, True):
        monkeypatch.setenv("TTY_COMPATIBLE", "1" if terminal else "0")
        for width in (80, 120, 30):
            monkeypatch.setenv("COLUMNS", str(width))
            for _ in range(20):
                rows = [
                    [rng.choice(words) * rng.randint(1, 2) for _ in columns] for _ in range(rng.randint(1, 6))
                ]
                for no_truncate in (False, True):
                    Output(OutputFormat.human, no_truncate=no_truncate).table(
                        None, columns, rows, widths=widths
                    )
                    by_rows = capsys.readouterr().out
                    cells = [list(col) for col in zip(*rows, strict=True)]
                    Output(OutputFormat.human, no_truncate=no_truncate).table(
                        None, columns, widths=widths, cells=cells
                    )
                    assert capsys.readouterr().out == by_rows, (rows, width, terminal, no_truncate)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["real_cache", "golden"])
def test_real_caches_list_the_bytes_of_the_listing(
    which: str,
    request: pytest.FixtureRequest,
    isolated_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The cache with every kind of entry and the traced golden pipeline (its ledger gives
    entries a parent, an operation and a last use): `ls` and `ls -q` write what `render_human`
    draws of the listing."""
    made: dict[str, Any] = request.getfixturevalue(which)
    src = Path(made["cache"])
    root = isolated_env / "copy"
    shutil.copytree(src, root, symlinks=True)
    import pyarrow as pa

    # One file no ledger records, next to the pipeline's (which the golden ledger records all).
    folder = min(root.rglob("cache-*.arrow")).parent
    _write_stream(folder / "cache-00000000000000ee.arrow", "00000000000000ee", {"id": pa.array([1])})
    assert_human_is_the_listing(root, monkeypatch, capsys, FEW_FORMS)
    if which == "golden":
        assert any(e.operation for e in read_listing(root, usage=recorded_usage(root)).report.entries)
