"""The read-through hooks of a traced run with a remote configured (`CACHETOOL_REMOTE`, or
`cachetool run --remote`): before a step computes, its result is looked up on the remote and
pulled; after it computed, it is pushed. They never raise into the user's pipeline: a result the
remote cannot give (absent, refused, unreachable) is computed here, and said on stderr."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cachetool.cache.layout import parse_cache_file
from cachetool.formatting import human_size
from cachetool.remote.client import REMOTE_ENV, Remote, RemoteRefused, open_remote


def _say(message: str) -> None:
    sys.stderr.write(f"cachetool: {message}\n")


class RemoteHook:
    """Pull on a miss, push after a compute, for one traced process."""

    def __init__(self, remote: Remote) -> None:
        self.remote = remote
        self._failed = False

    def before_compute(self, path: str, kwargs: Mapping[str, Any]) -> None:
        """A step (called with `kwargs`) is about to look for its cache file `path`: when neither
        it nor one of its shards is there, place the remote's copy (checked) so that `datasets`
        finds it. Not for a step told to compute (`load_from_cache_file=False`), nor with caching
        off."""
        from cachetool.remote.transfer import cache_files_of, fetch_record, note_served, pull_record

        folder, name = os.path.split(path)
        parsed = parse_cache_file(name)
        if kwargs.get("load_from_cache_file") is False or parsed is None or self._failed:
            return
        fingerprinting = sys.modules.get("datasets.fingerprint")
        if fingerprinting is not None and not fingerprinting.is_caching_enabled():
            return  # `disable_caching()`: datasets would not load it
        if cache_files_of(folder, parsed[0]):
            return
        try:
            record = fetch_record(self.remote, parsed[0])
            if record is None:
                return
            started = time.monotonic()
            pulled = pull_record(self.remote, record, Path(folder))
            if pulled.received:
                from cachetool.cache.dirs import enclosing_root

                took = time.monotonic() - started
                note_served(enclosing_root(folder), pulled, took, self.remote.url)
            _say(f"{parsed[0]} from {self.remote.url} ({human_size(pulled.received)}, checked)")
        except RemoteRefused as e:
            _say(f"{e.message}; the step computes here")
        except Exception as e:
            self._give_up(e)

    def after_compute(self, records: Iterable[Any]) -> None:
        """Push what the steps of `records` (ledger records) computed and wrote in a cache root."""
        from cachetool.history.records.steps import StepRecord
        from cachetool.remote.transfer import push_step

        seen = set()
        for rec in records:
            if not (isinstance(rec, StepRecord) and rec.computed and rec.root) or self._failed:
                continue
            for f in rec.files:
                folder, name = os.path.split(f.path)
                parsed = parse_cache_file(name)
                inside = folder.startswith(rec.root.rstrip("/") + "/")
                if f.status != "written" or parsed is None or not inside or (folder, parsed[0]) in seen:
                    continue
                seen.add((folder, parsed[0]))
                call_site = rec.call_site.to_json() if rec.call_site is not None else None
                try:
                    push_step(self.remote, rec.root, folder, parsed[0], call_site)
                except RemoteRefused as e:
                    _say(e.message)
                except Exception as e:
                    self._give_up(e)

    def _give_up(self, e: Exception) -> None:
        self._failed = True
        why = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
        _say(f"the remote is not used for the rest of this run: {why}")


def hook_from_env() -> RemoteHook | None:
    """The hooks of the remote `CACHETOOL_REMOTE` names; None (nothing imported) when unset or
    when it cannot be used (said once on stderr)."""
    if not os.environ.get(REMOTE_ENV):
        return None
    try:
        return RemoteHook(open_remote())
    except Exception as e:
        _say(f"{REMOTE_ENV} is not used: {getattr(e, 'message', e)}")
        return None
