"""`cachetool gc` as a plan: decide what goes (pure data), show it, then execute it item by item.

Two kinds of work, both planned the same way:

* **leftovers** (`--temp`, `leftovers`): what killed processes leave behind — `tmp*` files of a
  killed writer, `<hash or version>.incomplete/` folders of an interrupted preparation,
  interrupted `save_to_disk` folders, `*.incomplete` downloads, lock files that guard nothing any
  more, and in the temp dir `datasets` uses only `hf_datasets-*` and `pymp-*` folders (`tempdir`);
* **eviction** (`--older-than`, `--max-size`, `--dataset`, fingerprints; `eviction`): whole
  entries — every shard of a fingerprint together, a saved DatasetDict folder as one unit, the
  source splits of a builder folder together with its `dataset_info.json` (so `datasets`
  prepares it again instead of trusting a folder with holes).

`plan.build_plan()` decides from a scan, a liveness snapshot and a few lock probes; `execute()`
trusts none of it: right before each item it takes a fresh look (`recheck`) — not open or
memory-mapped by a live process (one `/proc` pass just before executing), no lock held, old
enough, owned by this user, inside the root (or the temp dir) and not a symlink — and it
deletes through directory file descriptors opened with `O_NOFOLLOW`, so a folder swapped for a
symlink after the check makes the open fail instead of redirecting the delete. One item failing
never stops the others. `gc_cache()` is the whole command in one call.

Processes on other machines of a shared file system are invisible to the liveness check; there,
`--min-age` is the only guard.

Part of `maintenance`: may import `trace`, `history`, `cache`, `fingerprint` and the base modules.
"""

from cachetool.maintenance.gc.execute import execute
from cachetool.maintenance.gc.gclock import GC_LOCK_NAME, gc_lock
from cachetool.maintenance.gc.model import (
    DEFAULT_MIN_AGE,
    LOCK_TIMEOUT,
    NOTHING_SELECTED,
    Action,
    GcBusy,
    GcItem,
    GcOptions,
    GcPlan,
    GcResult,
    KeptBecause,
    Outcome,
    Scope,
    Skip,
    Status,
    Target,
    named_but_kept,
)
from cachetool.maintenance.gc.plan import RootRefusal, build_plan, plan_gc, root_refusal
from cachetool.maintenance.gc.recheck import SNAPSHOT_MAX_AGE
from cachetool.maintenance.gc.run import ConfirmationNeeded, GcRun, gc_cache, gc_options
from cachetool.maintenance.gc.tempdir import TempFolder, TempScan, possible_owners, scan_temp_dir

__all__ = [
    "DEFAULT_MIN_AGE",
    "GC_LOCK_NAME",
    "LOCK_TIMEOUT",
    "NOTHING_SELECTED",
    "SNAPSHOT_MAX_AGE",
    "Action",
    "ConfirmationNeeded",
    "GcBusy",
    "GcItem",
    "GcOptions",
    "GcPlan",
    "GcResult",
    "GcRun",
    "KeptBecause",
    "Outcome",
    "RootRefusal",
    "Scope",
    "Skip",
    "Status",
    "Target",
    "TempFolder",
    "TempScan",
    "build_plan",
    "execute",
    "gc_cache",
    "gc_lock",
    "gc_options",
    "named_but_kept",
    "plan_gc",
    "possible_owners",
    "root_refusal",
    "scan_temp_dir",
]
