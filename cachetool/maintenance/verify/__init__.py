"""`verify`: prove every cache file is whole and what it claims to be.

`verify_cache(root)` scans the root without the read index (every header is read again; with
`deep=True` the index is used, as every byte is read and validated after), turns what the scan
found into findings (`checks`, `indices`), and adds the checks only verify makes: shard lengths
against `dataset_info.json`, indices that point past the end of their data, leftovers and who is
writing them, ledger records whose files are gone, and with `deep=True` a full validation of every
buffer plus, where a checksum is stored by an earlier `record=True` (or `record` stores one), an
xxh3 checksum of every byte (`deep`; a file whose bytes match a checksum stored after the same
pyarrow validated it is not validated again). `quarantine` moves what has errors aside, as a
plan with `execute()`.

Findings are typed (`model`): a `Problem` has a code, which decides its severity; the sentence
shown is rendered from the values read, never parsed back.

Part of `maintenance`: may import `trace`, `history`, `cache`, `fingerprint` and the base modules.
"""

from cachetool.maintenance.verify.deep import (
    DeepResult,
    deep_check,
    load_checksums,
    load_error,
    save_checksums,
)
from cachetool.maintenance.verify.model import (
    CHANGED,
    SEVERITY,
    Code,
    Finding,
    Problem,
    Severity,
    VerifyReport,
    recompute_hint,
)
from cachetool.maintenance.verify.quarantine_plan import (
    QuarantinePlan,
    QuarantineUnit,
    plan_quarantine,
    quarantine,
)
from cachetool.maintenance.verify.restore import Quarantined, quarantined, restore
from cachetool.maintenance.verify.run import verify_cache, with_stale_findings

__all__ = [
    "CHANGED",
    "SEVERITY",
    "Code",
    "DeepResult",
    "Finding",
    "Problem",
    "QuarantinePlan",
    "QuarantineUnit",
    "Quarantined",
    "Severity",
    "VerifyReport",
    "deep_check",
    "load_checksums",
    "load_error",
    "plan_quarantine",
    "quarantine",
    "quarantined",
    "recompute_hint",
    "restore",
    "save_checksums",
    "verify_cache",
    "with_stale_findings",
]
