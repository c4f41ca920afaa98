"""Naming a fingerprint in a root: the one naming rule (`cachetool.cache.lookup.resolve`) with
the ledger of the root loaded, and a name a root's ledger does not know looked for in the roots it
leads to.

Every command that takes a fingerprint (`show`, `lineage`, `explain`, `pin`, `unpin`, `gc --keep`,
`gc NAME`, `verify NAME`) resolves it by that rule, against one scan of the cache and the ledger
of its root: `resolve` when the command has both already, `resolve_in_root` when it has only the
root.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from cachetool.cache.lookup import Resolved, cache_file_key, resolve

if TYPE_CHECKING:
    from cachetool.cache.model import CacheReport
    from cachetool.history.ledger import Ledger


def resolve_in_root(
    root: str | os.PathLike[str], name: str, ledger: Ledger | None = None
) -> tuple[Resolved, CacheReport, Ledger]:
    """`resolve` for a command that has only the root: the ledger of `root` (loaded once unless
    given) and a scan of its cache, returned too so the command reads neither again. A root that
    cannot be scanned (gone since the records were made) resolves against the ledger alone."""
    from cachetool.cache.model import CacheReport
    from cachetool.cache.scan import scan_cache
    from cachetool.errors import CachetoolError
    from cachetool.history.ledger import Ledger

    if ledger is None:
        ledger = Ledger.load(root, follow=False)
    try:
        report = scan_cache(root, usage=ledger.usage())
    except CachetoolError:
        report = CacheReport(root=Path(os.path.abspath(os.fspath(root))), datasets=(), entries=())
    return resolve(name, report, ledger), report, ledger


def roots_recording(root: Path, name: str) -> list[str]:
    """The other roots whose ledger records a step result `name` (a fingerprint or its prefix, a
    cache file's name) names, among the roots `root`'s ledger leads to as `lineage` follows them
    (a `save_to_disk` folder of a state made in `root`, where a map after `load_from_disk` wrote).
    Sorted; empty for a path or an empty name."""
    from cachetool.history.ledger import Ledger
    from cachetool.history.records.steps import StepRecord

    key = cache_file_key(name)
    if os.sep in name or not key:  # a path; or the empty name, which every fingerprint starts with
        return []
    ledger = Ledger.load(root)
    return sorted(
        {
            r.read_from
            for r in ledger.records
            if isinstance(r, StepRecord)
            and r.read_from is not None
            and ledger.is_foreign(r)
            and r.result is not None
            and r.result.startswith(key)
        }
    )


@contextmanager
def named_elsewhere(root: Path, name: str, command: str) -> Iterator[None]:
    """Turn an `UnknownFingerprint` of `name` in `root` into `InAnotherRoot` when a root that
    `root`'s ledger leads to records it (`roots_recording`): the message names that root and
    `cachetool COMMAND NAME --cache-dir <it>`."""
    from cachetool.errors import InAnotherRoot, UnknownFingerprint

    try:
        yield
    except UnknownFingerprint as e:
        if type(e) is not UnknownFingerprint:  # a recorded-only fingerprint says so already
            raise
        others = roots_recording(root, name)
        if not others:
            raise
        raise InAnotherRoot(name, root, others, command) from None
