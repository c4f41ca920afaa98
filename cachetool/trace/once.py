"""One preparation per shared cache (`cachetool.prepare_once()`, `cachetool run --once`): of the
processes (ranks) running one pipeline on one cache folder, the first to reach a step its cache
does not hold takes a lease on the step's fingerprint and computes it; the others wait until that
lease is gone, then let `datasets` load the result as a cache hit.

A step's lease is `<root>/.cachetool/once/<fingerprint>.<n>.json`: a process lease
(`cachetool.trace.leases`, renewed by the same thread) naming the fingerprint, judged by the one
rule of `cachetool.cache.lease`. A leader killed on this host is dead at once (its pid and start
time are gone), one on another host once its lease expires (`CACHETOOL_LEASE_SECONDS`). The next
holder creates generation n + 1 with an atomic create: of the waiters that saw generation n over,
exactly one wins, and it removes the older files.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from cachetool.cache.layout import LEDGER_DIR, parse_cache_file
from cachetool.cache.lease import lease_state, read_lease
from cachetool.cache.roots import ONCE_DIR
from cachetool.processes import this_host
from cachetool.trace.leases import claim_step, drop_step

#: A waiter's first pause (s); each next is 1.5 times longer, up to `LONGEST_POLL`.
FIRST_POLL = 0.02
LONGEST_POLL = 0.5
#: After this long waiting for one step (s), say on stderr whom the process waits for.
SAY_AFTER = 10.0


def once_dir(root: str | os.PathLike[str]) -> Path:
    """Where the step leases of `root` live."""
    return Path(root) / LEDGER_DIR / ONCE_DIR


def result_present(path: str) -> bool:
    """Whether the cache holds the step whose file `datasets` writes at `path`: that file, or a
    whole set of num_proc shards of its fingerprint (`datasets` renames each into place once
    written: a name present is a file complete)."""
    if os.path.exists(path):
        return True
    folder, name = os.path.split(path)
    parsed = parse_cache_file(name)
    if parsed is None:
        return False
    shards: dict[int, set[int]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    prefix = f"cache-{parsed[0]}_"
    for other in names:
        if not other.startswith(prefix):
            continue
        found = parse_cache_file(other)
        if found is not None and found[0] == parsed[0] and found[1] is not None and found[2]:
            shards.setdefault(found[2], set()).add(found[1])
    return any(len(ranks) == count for count, ranks in shards.items())


def _generations(folder: Path, fingerprint: str) -> list[int]:
    """The generations of `fingerprint`'s lease files in `folder`."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for name in names:
        stem, _, ext = name.rpartition(".")
        fp, _, gen = stem.rpartition(".")
        if ext == "json" and fp == fingerprint and gen.isdigit():
            out.append(int(gen))
    return out


def take_turn(
    path: str,
    root: str | os.PathLike[str],
    *,
    may_wait: bool = True,
    say: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Path | None:
    """Before `datasets` looks for the step whose file is `path` (in cache root `root`): return
    once this process may go on. Returns the step lease it took (give it back with `give_back`
    when the step ended), or None: the result is in the cache (go on: it loads), or the step
    computes without a lease (the lease folder cannot be written; or another live process holds
    the lease and `may_wait` is False: a process holding a lease never waits for another's, so
    two processes taking steps in opposite orders cannot wait for each other forever)."""
    parsed = parse_cache_file(os.path.basename(path))
    if parsed is None:
        return None
    fp = parsed[0]
    folder = once_dir(root)
    me = this_host()
    poll, waited, said = FIRST_POLL, 0.0, False
    while not result_present(path):
        gens = _generations(folder, fp)
        gen = 0
        if gens:
            current = folder / f"{fp}.{max(gens)}.json"
            lease = read_lease(current)
            if lease is None and not os.path.lexists(current):
                continue  # given back since the listing: look again
            if lease is not None and lease_state(lease, me) == "live":
                if not may_wait:
                    return None
                if say is not None and not said and waited >= SAY_AFTER:
                    said = True
                    say(f"waiting for {lease} (it computes {fp}; lease {current.name})")
                sleep(poll)
                waited += poll
                poll = min(LONGEST_POLL, poll * 1.5)
                continue
            gen = max(gens) + 1  # over (or not a lease at all): the next generation takes over
        lease_path = folder / f"{fp}.{gen}.json"
        try:
            if not claim_step(lease_path, fp):
                continue  # another process took it first: wait for that one
        except (OSError, ValueError):
            return None  # no lease can be written here: compute as without --once
        for old in gens:
            with contextlib.suppress(OSError):
                (folder / f"{fp}.{old}.json").unlink()
        if result_present(path):  # made while this process looked: nothing to compute
            drop_step(lease_path)
            return None
        return lease_path
    return None


def give_back(leases: list[Path]) -> None:
    """The step ended (computed, loaded or raised): remove the leases it took."""
    for path in leases:
        drop_step(path)
    leases.clear()
