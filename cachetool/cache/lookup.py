"""Finding the entry a name stands for: a path, a fingerprint or alias, or a unique prefix.

The rule is `cachetool.history.ledger.resolve`, shared by every command that takes a name; this
is its form for a scanned report alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cachetool.errors import RecordedOnly

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cachetool.cache.model import CacheReport, Entry
    from cachetool.history.ledger import Ledger


def find_entry(
    report: CacheReport,
    prefix: str,
    ledger: Ledger | None = None,
    *,
    recorded: Sequence[str] | None = None,
) -> Entry:
    """The one entry `prefix` names, by the rule of `cachetool.history.ledger.resolve` (path,
    exact fingerprint or alias, unique prefix). With a `ledger` (or the fingerprints it records,
    `recorded`), fingerprints only it knows are candidates too; one of them named is
    `RecordedOnly` here (no entry holds it, and the message says what the ledger knows). Raises
    `AmbiguousFingerprint` listing candidates."""
    from cachetool.history.ledger import entry_at_path, resolve

    at_path = entry_at_path(report, prefix)  # a leftover named by its path has no fingerprint
    if at_path is not None:
        return at_path
    got = resolve(prefix, report, ledger, recorded=recorded)
    if got.entry is None:
        raise RecordedOnly(got.fingerprint, report.root, ledger)
    return got.entry
