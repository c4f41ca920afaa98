"""The fast paths of a listing give what the plain ones give: the read index, the Arrow header
walk, the JSON written without dicts, the garbage collector left as it was."""

from __future__ import annotations

import gc
import json
import mmap
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cachetool.cache import arrow
from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheFile, Entry, EntryProblem, entries_json
from cachetool.cache.scan import scan_cache
from cachetool.cli.ls import ls_document, ls_document_text
from cachetool.cli.output import envelope
from cachetool.formatting import iso_time
from tests.attack.races import synthesize_cache
from tests.conftest import hf_env, write_anew


def _write_stream(path: Path, fingerprint: str, rows: int) -> None:
    import pyarrow as pa

    meta = {"huggingface": json.dumps({"info": {"features": {}}, "fingerprint": fingerprint})}
    batch = pa.record_batch([pa.array(range(rows))], names=["id"])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, batch.schema.with_metadata(meta)) as w:
        w.write_batch(batch)


def test_a_file_swapped_for_one_of_the_same_size_and_mtime_is_read_again(tmp_path: Path) -> None:
    """A cache file replaced (renamed over) by another of the same size and mtime but other
    contents: the second listing reads the new file (the index is keyed by inode too)."""
    root = tmp_path / "cache"
    target = synthesize_cache(root, 1)[0]
    fp = target.name[len("cache-") : -len(".arrow")]
    first = scan_cache(root).find(fp)
    assert first.problems == ()
    st = target.stat()
    other = target.with_name("swap.tmp")
    other.write_bytes(target.read_bytes().replace(fp.encode(), b"f" * len(fp)))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, target)
    second = scan_cache(root).find(fp)
    assert [str(p) for p in second.problems] == [f"file holds fingerprint {'f' * len(fp)}, name says {fp}"]


def test_a_scan_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    """Library users keep their collector: scan_cache pauses it and turns it back on."""
    root = tmp_path / "cache"
    synthesize_cache(root, 3)
    assert gc.isenabled()
    scan_cache(root)
    assert gc.isenabled()
    gc.disable()
    try:
        scan_cache(root)
        assert not gc.isenabled()
    finally:
        gc.enable()


def _pyarrow_walk(path: Path) -> arrow.ArrowSummary:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return arrow.read_summary(path)
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return arrow._walk(mm, size)
        finally:
            mm.close()


def test_header_walk_agrees_with_pyarrows_reader_on_every_cut(tmp_path: Path) -> None:
    """The header walk and pyarrow's stream reader say the same (rows, batches, columns,
    metadata, completeness, error) for a good file and for the file cut at every byte."""
    root = tmp_path / "cache"
    data = synthesize_cache(root, 1)[0].read_bytes()
    probe = tmp_path / "probe.arrow"
    for cut in range(1, len(data) + 1):
        write_anew(probe, data[:cut])
        assert arrow.read_summary(probe) == _pyarrow_walk(probe), cut


@pytest.mark.slow
def test_header_walk_agrees_with_pyarrows_reader_on_a_real_cache(real_cache: dict[str, Any]) -> None:
    """Every Arrow file `datasets` wrote (data, indices, shards, saved, source splits)."""
    files = sorted(Path(real_cache["cache"]).rglob("*.arrow"))
    assert len(files) > 10
    for path in files:
        if path.is_file() and not path.is_symlink():
            assert arrow.read_summary(path) == _pyarrow_walk(path), path


@pytest.mark.slow
def test_ls_json_text_is_what_json_dumps_writes(real_cache: dict[str, Any], tmp_path: Path) -> None:
    """`ls --json` in a pipe writes each entry's text directly; it is the very text json.dumps
    writes for the same document, with odd file names too (quotes, non-ASCII, bytes that are
    not UTF-8)."""
    import shutil

    root = tmp_path / "cache"
    shutil.copytree(real_cache["cache"], root, symlinks=True)
    odd = root / "odd"
    odd.mkdir()
    for name in ['cache-"quoted"\\x.arrow', "cache-héllo→.arrow", "tmpabcdefgh"]:
        _write_stream(odd / name, "0123456789abcdef", 3)
    os.symlink("nowhere", odd / "dangling.arrow")
    (odd.parent / os.fsdecode(b"bad-\xff-name.arrow")).write_bytes(b"\xff\xff\xff\xffjunk")
    report = scan_cache(root)
    entries = list(report.entries)
    pinned = frozenset({entries[0].id})
    for pins in (frozenset(), pinned):
        text = "".join(ls_document_text(report, entries, pins))
        _assert_is_the_document(text, report, entries, pins)
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", "ls", str(root), "--json"],
        env=hf_env(tmp_path),
        capture_output=True,
        check=True,
    )
    assert json.loads(proc.stdout)["entries"] == [
        e.to_json() | {"pinned": False} for e in scan_cache(root).entries
    ]


def _assert_is_the_document(text: str, report: Any, entries: list[Any], pinned: frozenset[str]) -> None:
    """`text` is what json.dumps writes of the listing's document: its envelope, and each entry's
    object with whether it is pinned."""
    doc = json.loads(text)
    assert text == json.dumps(doc)
    assert doc == envelope(ls_document(report)) | {
        "entries": [e.to_json() | {"pinned": e.pinned_in(pinned)} for e in entries]
    }


def _rich_lines(columns: list[tuple[str, str]], rows: list[list[str]], widths: Any, width: int) -> str:
    """The table as Rich draws it (the direct path turned off)."""
    import io
    from unittest import mock

    from rich.console import Console

    from cachetool.cli import output

    out = output.Output(output.OutputFormat.human, width=width)
    buf = io.StringIO()
    out._console = Console(highlight=False, soft_wrap=False, width=width, file=buf)
    with mock.patch.object(output, "plain_column_lines", lambda *a: None):
        out.table(None, columns, rows, widths=widths)
    return buf.getvalue()


def test_large_tables_are_drawn_as_rich_draws_them() -> None:
    """`ls` on 20,000 entries pads its table directly instead of through Rich; the text is the
    one Rich draws, cut fingerprints, wide characters and markup-like names included, at 80 and
    120 columns; a table too wide for the terminal is still Rich's."""
    import random

    from cachetool.cli.output import plain_column_lines

    def plain_table_lines(columns: Any, rows: Any, widths: Any, width: int) -> list[str] | None:
        return plain_column_lines(
            columns, list(zip(*rows, strict=True)) if rows else [() for _ in columns], widths, width
        )

    rng = random.Random(7)
    words = ["derived", "shards 1/2", "[bold]x[/]", "héllo", "数据集", "", "0123456789abcdef0123", "1,234"]
    columns = [("kind", "left"), ("fingerprint", "left"), ("files", "right"), ("rows", "right")]
    widths = {"kind": (10, 18), "fingerprint": (16, 16)}
    drawn = 0
    for width in (80, 120, 30):
        for _ in range(60):
            rows = [
                [rng.choice(words) * rng.randint(1, 2) for _ in columns] for _ in range(rng.randint(0, 6))
            ]
            lines = plain_table_lines(columns, rows, widths, width)
            if lines is not None:
                drawn += 1
                assert "\n".join(lines) + "\n" == _rich_lines(columns, rows, widths, width), rows
    assert drawn > 60
    assert plain_table_lines(columns, [["", "", "9" * 200, ""]], widths, 80) is None


def test_sizes_read_as_humanize_writes_them() -> None:
    """Every size column shows what `humanize.naturalsize` wrote (cachetool formats it itself),
    at each unit's edges where rounding moves to the next unit."""
    import humanize

    from cachetool.formatting import human_size

    values = [0, 1, -1, 2, 999, 1000, 999_949, 999_950, 999_999, 10**28, 3 * 10**34, -4096]
    values += [10**k + d for k in range(3, 34) for d in (-51, -50, -49, -1, 0, 1)]
    values += [7**k for k in range(1, 40)]
    assert [human_size(v) for v in values] == [humanize.naturalsize(v) for v in values]


def test_ls_json_text_with_recorded_lineage_is_what_json_dumps_writes(
    tmp_path: Path,
) -> None:
    """Entries with a recorded parent and operation (some shared, some not, one non-ASCII), in
    folders whose names need escaping: each entry's JSON text, written from values entries share,
    is the text json.dumps writes for its dict, and the whole document too."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Use:
        last_used: float
        parent: str | None
        operation: str | None
        made_as: str | None = None
        saves: tuple[tuple[str, float], ...] = ()

    root = tmp_path / "cache"
    files = synthesize_cache(root, 6)
    odd = root / 'dé"jà' / "x"
    odd.mkdir(parents=True)
    for name in ["cache-00000000000000aa.arrow", "cache-00000000000000bb.arrow"]:
        _write_stream(odd / name, name[6:-6], 2)
    fps = [p.name[len("cache-") : -len(".arrow")] for p in files]
    usage = {
        fps[0]: Use(4e9, "p0", "map"),
        fps[1]: Use(1.0, "p0", "map"),
        fps[2]: Use(4e9 + 0.5, "pé→", "filter"),
        "00000000000000aa": Use(4e9, None, "map"),
    }
    report = scan_cache(root, usage=usage)
    entries = list(report.entries)
    assert {e.parent for e in entries} >= {"p0", "pé→", None}
    pinned = frozenset({entries[1].id})
    text = "".join(ls_document_text(report, entries, pinned))
    _assert_is_the_document(text, report, entries, pinned)


def test_paths_of_listed_files_are_the_paths_of_their_text(tmp_path: Path) -> None:
    """The paths a scan gives its files and entries are made without parsing their text; each
    behaves as `Path(str(path))` does: equal, hashing, sorting, printing, pickling and deriving
    paths alike, and the paths derived from it are ordinary."""
    root = tmp_path / "cache"
    synthesize_cache(root, 3)
    (root / "nested" / "deeper").mkdir(parents=True)
    (root / "nested" / "deeper" / "notes é.txt").write_text("x")
    paths = _assert_plain_paths(root)
    assert any(f.name == "notes é.txt" for f in paths)


@pytest.mark.slow
def test_paths_and_order_of_a_real_cache_are_the_plain_ones(real_cache: dict[str, Any]) -> None:
    """On a cache `datasets` wrote (every kind of entry): every path of the report behaves as the
    `Path` of its text, and the entries come in the order of (dataset, kind, split, path text)."""
    root = Path(real_cache["cache"])
    assert len(_assert_plain_paths(root)) > 20
    entries = list(scan_cache(root).entries)
    expected = sorted(entries, key=lambda e: (e.dataset or "~", e.kind.value, e.split or "", str(e.path)))
    assert entries == expected


def _assert_plain_paths(root: Path) -> list[Path]:
    """Check each path of a scan of `root` against `Path(str(path))`; return them."""
    import copy
    import pickle

    report = scan_cache(root)
    paths = [f.path for e in report.entries for f in e.files] + [e.path for e in report.entries]
    paths += [e.dataset_dir for e in report.entries if e.dataset_dir is not None]
    paths += [d.path for d in report.datasets]
    for p in paths:
        plain = Path(str(p))
        assert isinstance(p, type(plain))
        assert p == plain and plain == p and hash(p) == hash(plain) and {p: 1}[plain] == 1
        assert (str(p), os.fspath(p), repr(p), p.as_posix()) == (
            str(plain),
            os.fspath(plain),
            repr(plain),
            plain.as_posix(),
        )
        assert (p.name, p.stem, p.suffix, p.parts, p.anchor) == (
            plain.name,
            plain.stem,
            plain.suffix,
            plain.parts,
            plain.anchor,
        )
        assert p.parent == plain.parent and list(p.parents) == list(plain.parents)
        assert p.relative_to(root) == plain.relative_to(root)
        for derived in (p.parent, p.with_name("x"), p / "y", p.with_suffix(".z"), copy.copy(p)):
            assert type(derived) is type(plain)
        assert pickle.loads(pickle.dumps(p)) == plain and type(pickle.loads(pickle.dumps(p))) is type(plain)
        kind = (p.is_symlink(), p.is_file(), p.is_dir())
        assert kind == (plain.is_symlink(), plain.is_file(), plain.is_dir())
    assert sorted(paths) == sorted(Path(str(p)) for p in paths)
    return paths


def test_a_scan_lists_entries_by_dataset_kind_split_and_path(tmp_path: Path) -> None:
    """The report's entries come in the order of (dataset, kind, split, path text), with entries
    of several folders, kinds and names that sort differently as text than as parts."""
    root = tmp_path / "cache"
    synthesize_cache(root, 4)
    for folder in ("a", "a.b", "a/b"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name in ("cache-00000000000000aa.arrow", "zz.arrow", "note.txt"):
            _write_stream(root / folder / name, "00000000000000aa", 1)
    entries = list(scan_cache(root).entries)
    assert len(entries) > 10
    expected = sorted(entries, key=lambda e: (e.dataset or "~", e.kind.value, e.split or "", str(e.path)))
    assert entries == expected


def test_ls_json_text_of_thousands_of_entries_is_what_json_dumps_writes(tmp_path: Path) -> None:
    """`ls --json` in a pipe writes thousands of entries in pieces, entries of one shape through
    one template: the text is json.dumps's, across the pieces, with pins and without."""
    root = tmp_path / "cache"
    synthesize_cache(root, 5)
    (root / "notes.txt").write_text("x")
    report = scan_cache(root)
    entries = list(report.entries) * 401
    assert len(entries) > 2000
    for pins in (frozenset(), frozenset({entries[0].id})):
        text = "".join(ls_document_text(report, entries, pins))
        _assert_is_the_document(text, report, entries, pins)


def _fields(e: Entry) -> dict[str, Any]:
    """An entry's `--json` object, field by field as docs/listing.md lists them."""
    doc: dict[str, Any] = {
        "id": e.id,
        "kind": e.kind.value,
        "fingerprint": e.fingerprint,
        "aliases": list(e.aliases),
        "dataset": e.dataset,
        "dataset_dir": None if e.dataset_dir is None else str(e.dataset_dir),
        "split": e.split,
        "content": e.content,
        "path": str(e.path),
        "files": len(e.files),
        "expected_files": e.expected_files,
        "rows": e.rows,
        "expected_rows": e.expected_rows,
        "columns": [name for name, _ in e.columns],
        "size": e.size,
        "modified": iso_time(e.modified),
        "used": iso_time(e.used),
        "complete": e.complete,
        "parent": e.parent,
        "operation": e.operation,
        "unit": None if e.unit is None else str(e.unit),
        "problems": [str(p) for p in e.problems],
    }
    if e.kind is Kind.TF_CACHE:
        doc.update(prefix=e.path.name, state=e.state, writer_pids=list(e.writer_pids))
    elif e.kind is Kind.TEMP:
        doc["resumable"] = bool(e.resumable_rows)
    return doc


def test_each_entry_is_written_as_json_dumps_writes_its_fields(tmp_path: Path) -> None:
    """Every kind of entry, with names JSON escapes (quotes, non-ASCII, bytes that are not
    UTF-8), a tf.data cache, a resumable temp file, recorded lineage and a pin, is written as
    `json.dumps` writes its fields."""
    root = tmp_path / "cache"
    synthesize_cache(root, 3)
    odd = root / 'caf\u00e9 "q"' / os.fsdecode(b"\xff-dir")
    odd.mkdir(parents=True)
    _write_stream(root / "x", "00000000000000ab", 3)  # pyarrow takes UTF-8 paths only
    os.rename(root / "x", odd / "cache-00000000000000ab.arrow")
    (odd / "notes \u2603.txt").write_text("x")
    entries = list(scan_cache(root).entries)
    first = entries[0]
    f = CacheFile(root / "t.index", 10, 1.5e9)
    resumable = EntryProblem(code="resumable", got=7, want="fp")
    entries += [
        replace(first, parent="p\u00e9re", operation='map "x"', last_used=2e9, aliases=("a1", "a2")),
        Entry(Kind.TF_CACHE, root / "t", (f,), state="being-written", writer_pids=(12, 34)),
        Entry(Kind.TF_CACHE, root / "u", (f,), problems=(EntryProblem("x\ny"),)),
        Entry(Kind.TEMP, root / "tmpabcdefgh", (f,), problems=(resumable,)),
        Entry(Kind.TEMP, root / "tmpabcdefgi", (f,), unit=root),
    ]
    pins = frozenset({first.id})
    text = "[" + entries_json(entries, pins) + "]"
    assert text == json.dumps([_fields(e) | {"pinned": e.pinned_in(pins)} for e in entries])
    assert [e.to_json() for e in entries] == [_fields(e) for e in entries]


def test_a_warm_listing_gives_a_prepared_split_its_fingerprint_without_hashing(tmp_path: Path) -> None:
    """A prepared split listed again (read index present) has the fingerprint the first listing
    computed, and the listing does not load the hashing code."""
    root = tmp_path / "cache"
    folder = synthesize_cache(root, 1)[0].parent
    _write_stream(folder / "csv-train.arrow", "", 4)
    script = (
        "import json, sys; from cachetool.cache.scan import scan_cache; "
        f"e = [e for e in scan_cache({str(root)!r}).entries if e.split == 'train'][0]; "
        "print(json.dumps([e.fingerprint, 'cachetool.fingerprint.hashing' in sys.modules]))"
    )
    env = {**hf_env(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True) for _ in "12"
    ]
    (cold_fp, cold_hashed), (warm_fp, warm_hashed) = (json.loads(r.stdout) for r in runs)
    assert cold_fp == warm_fp and len(cold_fp) == 16
    assert cold_hashed and not warm_hashed
