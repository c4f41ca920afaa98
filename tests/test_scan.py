"""The cache model on a real cache made by `datasets`: every kind, every fingerprint source."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cachetool.cache.layout import Kind
from cachetool.cache.model import CacheReport, Entry
from cachetool.cache.scan import scan_cache
from cachetool.errors import AmbiguousFingerprint, CacheNotFound, UnknownFingerprint

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(real_cache: dict[str, Any]) -> CacheReport:
    return scan_cache(real_cache["cache"])


def by_fp(report: CacheReport, fp: str, kind: Kind | None = None) -> Entry:
    found = [e for e in report.entries if e.fingerprint == fp and (kind is None or e.kind == kind)]
    assert len(found) == 1, (fp, found)
    return found[0]


def test_every_entry_of_the_csv_dataset_has_the_kind_and_fingerprint_datasets_reports(
    report: CacheReport, real_cache: dict[str, Any]
) -> None:
    """ls shows one row per dataset state, with the fingerprint `ds._fingerprint` had."""
    csv_dir = Path(real_cache["csv_dir"])
    rows = {
        (e.kind, e.fingerprint, e.rows, len(e.files), e.split, e.content, e.expected_files)
        for e in report.entries
        if e.dataset_dir == csv_dir and e.kind not in (Kind.LOCK, Kind.TEMP)
    }
    assert rows == {
        (Kind.SOURCE, real_cache["csv_source"], 300, 1, "train", "data", None),
        (Kind.DERIVED, real_cache["mapped"], 300, 1, None, "data", None),
        (Kind.INDICES, real_cache["filtered"], 200, 1, None, "indices", None),
        (Kind.INDICES, real_cache["shuffled"], 300, 1, None, "indices", None),
        (Kind.INDICES, real_cache["train"], 225, 1, None, "indices", None),
        (Kind.INDICES, real_cache["test"], 75, 1, None, "indices", None),
        (Kind.SHARDS, real_cache["shards"], 300, 2, None, "data", 2),
        (Kind.SHARDS, real_cache["partial_shards"], 150, 1, None, "data", 2),
        (Kind.DERIVED, "my-own_fingerprint.v2", 300, 1, None, "data", None),
    }
    partial = by_fp(report, real_cache["partial_shards"])
    assert partial.complete is False and partial.kind_str == "shards 1/2"
    assert [str(p) for p in partial.problems] == ["partial: 1 of 2 shards (missing 00001)"]
    assert by_fp(report, real_cache["shards"]).complete is True


def test_source_split_fingerprint_is_recomputed_from_the_builder_path(
    report: CacheReport, real_cache: dict[str, Any]
) -> None:
    """The fingerprint of csv-train.arrow equals what load_dataset(...)._fingerprint was."""
    src = by_fp(report, real_cache["csv_source"], Kind.SOURCE)
    assert src.expected_rows == 300 and src.rows == 300 and src.problems == ()
    js = by_fp(report, real_cache["json_source"], Kind.SOURCE)
    assert [f.path.name for f in js.files] == real_cache["json_files"]
    assert js.expected_files == 2 and js.rows == 100 and js.complete
    remote = by_fp(report, real_cache["remote_source"], Kind.SOURCE)
    assert remote.rows == 2


def test_saved_dataset_has_state_fingerprint_and_load_from_disk_alias(
    report: CacheReport, real_cache: dict[str, Any]
) -> None:
    """A save_to_disk folder is one entry; its alias is the fingerprint load_from_disk gives."""
    saved = by_fp(report, real_cache["saved_state_fp"], Kind.SAVED)
    assert saved.aliases == (real_cache["saved_loaded_fp"],)
    assert sorted(f.name for f in saved.files) == [
        "data-00000-of-00002.arrow",
        "data-00001-of-00002.arrow",
        "dataset_info.json",
        "state.json",
    ]
    assert saved.rows == 300 and saved.problems == ()
    assert report.find(real_cache["saved_loaded_fp"][:10]) == saved
    # The map after load_from_disk wrote its cache file into the saved folder.
    remapped = by_fp(report, real_cache["saved_remapped"])
    assert remapped.kind == Kind.DERIVED and remapped.path.parent == saved.path


def test_saved_datasetdict_lists_one_entry_per_split_deleted_as_one_unit(
    report: CacheReport, real_cache: dict[str, Any]
) -> None:
    splits = [e for e in report.entries if e.kind == Kind.SAVED and e.unit and e.unit.name == "splits"]
    assert sorted((e.split, e.rows) for e in splits) == [("test", 75), ("train", 225)]
    assert {e.unit for e in splits} == {Path(real_cache["cache"]) / "saved" / "splits"}
    assert by_fp(report, real_cache["dict_train_state_fp"], Kind.SAVED).split == "train"


def test_leftovers_are_their_own_kinds(report: CacheReport, real_cache: dict[str, Any]) -> None:
    """A SIGKILLed map leaves temp; a killed prepare leaves incomplete-prepare; a save without
    state.json is incomplete-save."""
    temps = [e for e in report.entries if e.kind == Kind.TEMP]
    assert sorted(e.path.name for e in temps) == real_cache["temp_files"]
    assert all(e.aliases and e.aliases[0] for e in temps)  # the fingerprint the writer was making
    prep = [e for e in report.entries if e.kind == Kind.INCOMPLETE_PREPARE]
    assert [str(e.path) for e in prep] == real_cache["incomplete_prepare"]
    assert prep[0].dataset is not None and prep[0].dataset.startswith("generator/default-")
    saves = [e for e in report.entries if e.kind == Kind.INCOMPLETE_SAVE]
    assert [e.path.name for e in saves] == ["interrupted"]


def test_downloads_extracted_and_locks(report: CacheReport, real_cache: dict[str, Any]) -> None:
    downloads = [e for e in report.entries if e.kind == Kind.DOWNLOAD]
    assert len(downloads) == 2 and all(len(e.files) == 2 for e in downloads)  # file + .json
    extracted = [e for e in report.entries if e.kind == Kind.EXTRACTED]
    assert [str(e.path) for e in extracted] == [real_cache["extracted"]]
    locks = [e for e in report.entries if e.kind == Kind.LOCK]
    csv_locks = [e for e in locks if e.dataset_dir == Path(real_cache["csv_dir"])]
    # the root lock named after the folder's path, <hash>_builder.lock, <hash>.incomplete_info.lock
    assert len(csv_locks) == 3


def test_totals_count_every_file_once(report: CacheReport, real_cache: dict[str, Any]) -> None:
    on_disk = 0
    size = 0
    root = Path(real_cache["cache"])
    for dirpath, dirnames, filenames in os.walk(root):
        if ".cachetool" in dirnames:
            dirnames.remove(".cachetool")
        for n in filenames:
            on_disk += 1
            size += os.lstat(os.path.join(dirpath, n)).st_size
    assert report.file_count == on_disk
    assert report.size == size
    assert report.totals()["lock"][1] == 0


def test_second_scan_uses_the_read_index_and_gives_the_same_report(real_cache: dict[str, Any]) -> None:
    first = scan_cache(real_cache["cache"])
    second = scan_cache(real_cache["cache"])
    assert first == second
    from cachetool.cache.locations import derived_dir

    kept = derived_dir(real_cache["cache"])
    assert kept is not None and (kept / "read-index.z").is_file()
    assert not (Path(real_cache["cache"]) / ".cachetool" / "read-index.z").exists()


def test_prefix_lookup(report: CacheReport, real_cache: dict[str, Any]) -> None:
    assert report.find(real_cache["csv_source"][:6]).kind == Kind.SOURCE
    with pytest.raises(UnknownFingerprint):
        report.find("zzzz-not-there")
    # The saved copy holds the same fingerprint as the derived file it was saved from.
    with pytest.raises(AmbiguousFingerprint) as exc:
        report.find(real_cache["mapped"])
    assert "derived" in exc.value.message and "saved" in exc.value.message


def test_missing_root_is_a_domain_error(tmp_path: Path) -> None:
    with pytest.raises(CacheNotFound) as exc:
        scan_cache(tmp_path / "nope")
    assert exc.value.message == f"cache directory not found: {tmp_path / 'nope'}"


def test_a_file_damaged_in_place_with_its_size_and_mtime_put_back_is_read_again(
    real_cache: dict[str, Any], tmp_path: Path
) -> None:
    """The read index remembers a file by size, change time and inode: a cache file whose
    end-of-stream marker is overwritten in place, its mtime then put back, lists as incomplete
    in `ls` at once, not as the complete file the index remembered."""
    import shutil

    root = tmp_path / "cache"
    shutil.copytree(real_cache["cache"], root, symlinks=True)
    target = next(root.rglob(f"cache-{real_cache['mapped']}.arrow"))
    assert by_fp(scan_cache(root), real_cache["mapped"], Kind.DERIVED).complete  # now in the index
    st = target.stat()
    with open(target, "r+b") as f:
        f.seek(st.st_size - 8)
        f.write(b"\0" * 8)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_size == st.st_size and target.stat().st_mtime_ns == st.st_mtime_ns
    assert not by_fp(scan_cache(root), real_cache["mapped"], Kind.DERIVED).complete
