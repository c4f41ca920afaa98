"""`cachetool dirs`: where everything is, and why."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.cli.common import CACHE_DIR, OUTPUT, command
from cachetool.cli.output import Output

if TYPE_CHECKING:
    from cachetool.cache.fstype import FileSystem


@command(cache_dir=CACHE_DIR, **OUTPUT)
def dirs_command(cache_dir: Path | None, out: Output) -> None:
    """Print every location cachetool and `datasets` use, and where each value came from.

    Resolved in the same order as `datasets` itself: `--cache-dir`, `HF_DATASETS_CACHE`,
    `HF_HOME`, `XDG_CACHE_HOME`, default. Also the temp dir `datasets` puts `hf_datasets-*`
    folders in (`TMPDIR`, `TEMP`, `TMP`, system default) and the Hub cache (`HF_HUB_CACHE`),
    where raw files of Hub datasets live (manage that one with `hf cache`). The `from` column also
    names each existing folder's file system, marked `shared` for network and cluster ones (NFS, Lustre, GPFS,
    CephFS, CIFS, FUSE), where other hosts may write the same cache. Last come the other cache
    roots traced runs wrote in (from `registry`): a `save_to_disk` folder that a map after
    `load_from_disk` wrote its cache file into is a cache root of its own (pass it as `--cache-dir`).

    **Examples**

        cachetool dirs

        HF_HOME=/data/hf cachetool dirs

        cachetool dirs --json

        du -sh "$(cachetool dirs -q | head -1)"

    Exit codes: 0 shown (missing folders are shown as missing); 2 usage.
    """
    from cachetool.cache.fstype import file_system
    from cachetool.cache.locations import resolve_dirs

    locations = resolve_dirs(cache_dir)
    systems = {loc.path: file_system(loc.path) if loc.exists else None for loc in locations}
    doc = {
        "locations": [
            {
                "name": loc.name,
                "path": os.fsdecode(loc.path),
                "source": loc.source,
                "exists": loc.exists,
                "description": loc.description,
                "filesystem": fs.type if (fs := systems[loc.path]) else None,
                "shared": fs.shared if fs else None,
            }
            for loc in locations
        ],
    }
    if not out.emit(lambda: doc, (os.fsdecode(loc.path) for loc in locations)):
        # `from` says where the path came from and what holds it: its file system, or "missing".
        sources = [
            f"{loc.source}; {_fs_cell(systems[loc.path]) if loc.exists else 'missing'}".rstrip("; ")
            for loc in locations
        ]
        # Paths get the room the names and a folded `from` column leave; names are never split.
        room = out.width - 18 - 4 - min(24, max(len(s) for s in sources))
        out.table(
            None,
            [("location", "left"), ("path", "left"), ("from", "left")],
            [(loc.name, out.path(loc.path, room), src) for loc, src in zip(locations, sources, strict=True)],
            widths={"location": (18, 18)},
            whole=("path",),
        )
        out.line()
        for name, description in dict((loc.name, loc.description) for loc in locations).items():
            out.line(f"{name}: {description}", style="dim")


def _fs_cell(fs: FileSystem | None) -> str:
    if fs is None:
        return ""
    return f"{fs.type} (shared)" if fs.shared else fs.type
