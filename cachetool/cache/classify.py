"""The walk's rules for dataset folders: which folder is a saved dataset, a saved DatasetDict,
an interrupted save or a prepared builder folder, and which entry each file of a folder is part
of (`cachetool.cache.layout` holds the name patterns)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from cachetool.cache import layout
from cachetool.cache.entries import derived_entry, plain_arrow_entry, shard_set_entry, source_entry
from cachetool.cache.layout import Kind, parse_cache_file
from cachetool.cache.model import CacheFile, DatasetDir, DirKind, Entry
from cachetool.cache.nondata import NonDataWalker
from cachetool.cache.recognize import (
    is_count,
    is_dataset_dict,
    is_datasets_state,
    is_interrupted_save,
    looks_like_arrow_stream,
    read_json,
    relative_data_dir,
)
from cachetool.cache.walk import Item, list_dir
from cachetool.fingerprint.hashing import loaded_fingerprint


class Scanner(NonDataWalker):
    """One scan of a cache root: `walk(root)` fills `entries`, `datasets` and `warnings`."""

    #: The folders still to walk, the next one last (None: no walk under way).
    _pending: list[tuple[Path, Path | None, DatasetDir | None]] | None = None

    # -- the walk -------------------------------------------------------------------------------
    def walk(self, path: Path, unit: Path | None = None, dataset_hint: DatasetDir | None = None) -> None:
        """Classify the folder `path` and, in turn, its subfolders, in depth-first order.

        The folders to walk wait on a list, not on Python's stack: a folder nested a thousand
        levels deep is listed like any other (one too long for the system to open is a warning
        and an unreadable entry). Called while a walk is under way (a saved dataset's
        subfolders), `path` is walked after the folder at hand."""
        pending = self._pending
        if pending is not None:
            pending.append((path, unit, dataset_hint))
            return
        self._pending = pending = [(path, unit, dataset_hint)]
        try:
            while pending:
                start = len(pending) - 1
                self._walk_folder(*pending.pop())
                pending[start:] = pending[start:][::-1]  # the first subfolder is walked first
        finally:
            self._pending = None

    def _walk_folder(self, path: Path, unit: Path | None, dataset_hint: DatasetDir | None) -> None:
        """Classify the folder `path`: a saved dataset (dict), an interrupted save, a builder's
        folder, or files of any other folder; its subfolders go to `walk`."""
        items, err = list_dir(path)
        if err:
            self.warn(path, err)
            self.entries.append(Entry(Kind.UNREADABLE, path, (), problems=(err,)))
            return
        names = {it.name for it in items if it.is_file}
        is_root = path == self.root

        if layout.DATASET_DICT_JSON in names and is_dataset_dict(path / layout.DATASET_DICT_JSON):
            self.saved_dict(path, items)
            return
        if layout.STATE_JSON in names and is_datasets_state(read_json(path / layout.STATE_JSON)):
            self.saved(path, items, unit=unit)
            return
        ds: DatasetDir | None = dataset_hint
        if (
            layout.STATE_JSON not in names
            and any(n[:5] == "data-" and layout.SAVED_SHARD_RE.match(n) for n in names)
            and is_interrupted_save(items)
        ):
            # state.json is written last: data-*.arrow without it is a save that did not finish.
            self.incomplete_save(path, items)
            return
        if layout.DATASET_INFO in names and relative_data_dir(path) is not None:
            ds = self.builder_dir(path, items)
        self.files_in(path, items, ds)
        for it in items:
            if it.is_dir:
                self.subfolder(it, ds, is_root)

    def subfolder(self, it: Item, ds: DatasetDir | None, is_root: bool) -> None:
        """A folder met by `walk`: cachetool's own (skipped), a killed gc's, an interrupted
        preparation, the downloads, or one walked in turn."""
        if it.name == layout.LEDGER_DIR:
            return  # cachetool's own records (any folder can be a root of its own)
        if layout.GC_TRASH_RE.match(it.name):
            self.entries.append(self.gc_trash(it, ds))
            return
        rel = None
        if layout.is_incomplete_dir(it.name):
            final = it.path.with_name(it.name[: -len(layout.INCOMPLETE_DIR_SUFFIX)])
            rel = relative_data_dir(final)
        if rel is not None:  # `<name>/<config>/<version>[/<hash>].incomplete`, as datasets names it
            files = self.tree_files(it.path)
            label = "/".join(rel.split("/")[:2]) if rel else (ds.name if ds else it.name)
            self.entries.append(
                Entry(
                    Kind.INCOMPLETE_PREPARE,
                    it.path,
                    tuple(files),
                    dataset=label,
                    dataset_dir=final,
                    problems=("interrupted load_dataset preparation",),
                )
            )
            return
        if is_root and it.name == "downloads":
            self.downloads(it.path)
            return
        self.walk(it.path)

    def files_in(self, path: Path, items: Sequence[Item], ds: DatasetDir | None) -> None:
        """Classify the files of one folder; `ds` is the dataset folder it is (if any)."""
        shard_groups: dict[str, list[CacheFile]] = defaultdict(list)
        shard_counts: dict[str, int] = {}
        source_groups: dict[str, list[CacheFile]] = defaultdict(list)
        source_counts: dict[str, int] = {}
        splits = [s for s, _ in ds.split_rows] if ds is not None and ds.kind == DirKind.BUILDER else []
        entries = self.entries
        for it in self.tf_caches(path, items, ds):
            if not it.is_file:
                odd = None if it.is_dir else self.odd(it, ds)
                if odd is not None:
                    entries.append(odd)
                continue
            name = it.name
            # Most files of a cache are `cache-<fp>.arrow`: never metadata, a lock, a gc leftover
            # or a temporary file, so one prefix test passes them straight to the pattern.
            if name.startswith("cache-"):
                parsed = parse_cache_file(name)
            else:
                parsed = None
                if ds is not None and name in layout.METADATA_NAMES:
                    continue  # attached to the DatasetDir
                special = self.special_file(it, ds)
                if special is not None:
                    entries.append(special)
                    continue
            if parsed is not None:
                fp, rank, count = parsed
                if rank is not None and count is not None:
                    shard_groups[fp].append(self.cache_file(it, arrow=True, shard=(rank, count)))
                    shard_counts[fp] = max(count, shard_counts.get(fp, 0))
                else:
                    entries.append(derived_entry(self.cache_file(it, arrow=True), fp, ds))
            elif splits and (src := layout.source_split_of(name, splits)) is not None:
                split, index, count = src
                shard = (index, count) if index is not None and count is not None else None
                source_groups[split].append(self.cache_file(it, arrow=True, shard=shard))
                if count is not None:
                    source_counts[split] = count
            elif name.endswith(".arrow"):
                entries.append(plain_arrow_entry(self.cache_file(it, arrow=True), ds))
            else:
                f = self.cache_file(it, arrow=False)
                if ds is None:
                    kind = Kind.METADATA if name in layout.METADATA_NAMES else Kind.OTHER
                    entries.append(Entry(kind, it.path, (f,)))
                else:
                    entries.append(Entry(Kind.OTHER, it.path, (f,), dataset=ds.name, dataset_dir=ds.path))
        for fp, files in sorted(shard_groups.items()):
            entries.append(shard_set_entry(fp, files, shard_counts[fp], ds))
        for split, files in sorted(source_groups.items()):
            entries.append(source_entry(split, files, source_counts.get(split), ds))

    def meta_files(self, items: Sequence[Item]) -> tuple[CacheFile, ...]:
        """The metadata files (`dataset_info.json`, `state.json`, ...) among a folder's items."""
        return tuple(
            self.cache_file(it, arrow=False)
            for it in items
            if it.is_file and it.name in layout.METADATA_NAMES
        )

    def special_file(self, it: Item, ds: DatasetDir | None) -> Entry | None:
        """The entry of a lock file, of what a killed gc set aside, or of a temporary file a
        writer is filling (or left behind); None for any other file."""
        name = it.name
        dsname, dspath = (ds.name, ds.path) if ds is not None else (None, None)
        if layout.is_lock_name(name):
            f = self.cache_file(it, arrow=False)
            return Entry(Kind.LOCK, it.path, (f,), dataset=dsname, dataset_dir=dspath)
        if name.startswith(layout.GC_TRASH_PREFIX) and layout.GC_TRASH_RE.match(name):
            return self.gc_trash(it, ds)
        if name.startswith("tmp") and layout.TEMP_FILE_RE.match(name) and looks_like_arrow_stream(it.path):
            f = self.cache_file(it, arrow=True)
            fp = f.summary.fingerprint if f.summary else None
            return Entry(
                Kind.TEMP,
                it.path,
                (f,),
                dataset=dsname,
                dataset_dir=dspath,
                fingerprint=None,
                aliases=(fp,) if fp else (),
                problems=("temporary file: a writer in progress or killed",),
            )
        return None

    # -- entry builders ------------------------------------------------------------------------

    def builder_dir(self, path: Path, items: Sequence[Item]) -> DatasetDir:
        info = read_json(path / layout.DATASET_INFO)
        split_rows: list[tuple[str, int]] = []
        shard_lengths: list[tuple[str, tuple[int, ...]]] = []
        if isinstance(info, dict):
            splits = info.get("splits") or {}
            if isinstance(splits, dict):
                for name, s in splits.items():
                    if isinstance(s, dict) and isinstance(s.get("num_examples"), int):
                        split_rows.append((str(name), s["num_examples"]))
                        lengths = s.get("shard_lengths")
                        if isinstance(lengths, list) and all(is_count(x) for x in lengths):
                            shard_lengths.append((str(name), tuple(lengths)))
                        elif lengths is not None:
                            self.warn(
                                path / layout.DATASET_INFO, f"split {name}: shard_lengths are not counts"
                            )
        else:
            self.warn(path / layout.DATASET_INFO, "unreadable dataset_info.json")
        rel = relative_data_dir(path)
        meta = self.meta_files(items)
        name = "/".join(rel.split("/")[:2]) if rel else path.name
        ds = DatasetDir(path, name, DirKind.BUILDER, rel, tuple(split_rows), tuple(shard_lengths), meta)
        self.datasets.append(ds)
        return ds

    def saved(
        self, path: Path, items: Sequence[Item], unit: Path | None = None, split_name: str | None = None
    ) -> None:
        state = read_json(path / layout.STATE_JSON)
        meta = self.meta_files(items)
        label = f"{unit.name}/{path.name}" if unit is not None else path.name
        ds = DatasetDir(path, label, DirKind.SAVED)  # its metadata files belong to the entry below
        self.datasets.append(ds)
        problems: list[str] = []
        fp = aliases = None
        named: list[str] = []
        if isinstance(state, dict):
            fp = state.get("_fingerprint") if isinstance(state.get("_fingerprint"), str) else None
            alias = loaded_fingerprint(state)
            aliases = (alias,) if alias and alias != fp else ()
            for d in state.get("_data_files") or []:
                if isinstance(d, dict) and isinstance(d.get("filename"), str):
                    named.append(d["filename"])
            split_name = split_name or (state.get("_split") if isinstance(state.get("_split"), str) else None)
        else:
            problems.append("unreadable state.json")
            self.warn(path / layout.STATE_JSON, "unreadable state.json")
        files: list[CacheFile] = list(meta)
        other: list[Item] = []
        for it in items:
            if it.is_file and layout.SAVED_SHARD_RE.match(it.name):
                m = layout.SAVED_SHARD_RE.match(it.name)
                assert m is not None
                files.append(self.cache_file(it, arrow=True, shard=(int(m["index"]), int(m["count"]))))
            elif it.name not in layout.METADATA_NAMES:
                other.append(it)
        present = {f.name for f in files}
        for n in named:
            if n not in present:
                problems.append(f"state.json names {n}, which is missing")
        for f in files:
            if f.summary is not None and f.summary.error:
                problems.append(f"{f.name}: {f.summary.error}")
        self.entries.append(
            Entry(
                Kind.SAVED,
                path,
                tuple(files),
                dataset=label,
                dataset_dir=path,
                fingerprint=fp,
                aliases=aliases or (),
                split=split_name,
                content="data",
                expected_files=len(named) or None,
                unit=unit or path,
                problems=tuple(problems),
            )
        )
        # A map after load_from_disk writes cache-<fp>.arrow into the saved folder.
        self.files_in(path, [it for it in other if not it.is_dir], ds)
        for it in other:
            if it.is_dir and it.name != layout.LEDGER_DIR:
                self.walk(it.path, dataset_hint=ds)

    def saved_dict(self, path: Path, items: Sequence[Item]) -> None:
        doc = read_json(path / layout.DATASET_DICT_JSON)
        splits = doc.get("splits") if isinstance(doc, dict) else None
        if not isinstance(splits, list):
            self.warn(path / layout.DATASET_DICT_JSON, "unreadable dataset_dict.json")
            splits = []
        meta = self.meta_files(items)
        self.datasets.append(DatasetDir(path, path.name, DirKind.SAVED_DICT, meta_files=meta))
        for it in items:
            if it.is_dir:
                sub_items, err = list_dir(it.path)
                if err is None and any(s.name == layout.STATE_JSON for s in sub_items):
                    self.saved(it.path, sub_items, unit=path, split_name=it.name)
                else:
                    self.walk(it.path, unit=path)
            elif it.name not in layout.METADATA_NAMES:
                odd = self.odd(it, None)
                f = self.cache_file(it, arrow=False) if odd is None else None
                self.entries.append(odd or Entry(Kind.OTHER, it.path, (f,) if f else (), unit=path))
        for s in splits:
            if isinstance(s, str) and not (path / s / layout.STATE_JSON).is_file():
                self.warn(path / s, "dataset_dict.json names this split, but it has no state.json")

    def incomplete_save(self, path: Path, items: Sequence[Item]) -> None:
        files = []
        for it in items:
            if it.is_dir:
                files.extend(self.tree_files(it.path))
            elif it.ok:
                files.append(self.cache_file(it, arrow=bool(layout.SAVED_SHARD_RE.match(it.name))))
        self.entries.append(
            Entry(
                Kind.INCOMPLETE_SAVE,
                path,
                tuple(files),
                dataset=path.name,
                dataset_dir=path,
                problems=("data-*.arrow without state.json: an interrupted save_to_disk",),
            )
        )
