"""Layer 2 of the tracer, the hash watch: inside an `update_fingerprint` call the tracer watches
(`watched`: a `Watch` in the thread's call state), `Hasher.hash` notes each top-level digest and
the exception `datasets` swallows before it falls back to a random fingerprint, and
`generate_random_fingerprint` notes that the fallback happened. Nothing is pickled a second time.
`hash_event` is what the tracer keeps of the call."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from cachetool.trace.calls import CallState, HashEvent, Watch
from cachetool.trace.describe import hash_tree
from cachetool.trace.settings import event_counter


def watched(local: CallState, original: Callable[..., str], *args: Any) -> tuple[str, Watch]:
    """`original(*args)` (an `update_fingerprint`) with a new watch in place, and the watch; the
    thread's previous watch is back after it."""
    watch = Watch()
    previous = local.watch
    local.watch = watch
    try:
        result = original(*args)
    finally:
        local.watch = previous
    return result, watch


def hash_event(
    parent: Any, transform: Any, args: Any, result: str, watch: Watch, *, trees: bool
) -> HashEvent:
    """The event of one watched `update_fingerprint` call, numbered in the process's sequence;
    with `trees` (determinism runs), the hash tree of each argument."""
    # A copy: train_test_split reuses one dict for its two hashes, changing fingerprint_name.
    args = dict(args) if isinstance(args, Mapping) else args
    ev = HashEvent(parent, transform, args, result, watch, next(event_counter))
    if trees and isinstance(args, Mapping):
        # Now, before the transform runs: a map may change the objects its function uses
        # (a tokenizer switching truncation on), and the tree must show what datasets hashed.
        ev.trees = {str(key): hash_tree(value) for key, value in args.items()}
    return ev


def wrap_hash(original: Callable[..., str], local: CallState) -> Callable[..., str]:
    """`Hasher.hash`, noting its digest (or its error) in the watch of the call it runs in."""

    @functools.wraps(original)
    def hash(cls: Any, value: Any) -> str:
        w = local.watch
        if w is None or w.depth:
            return original(cls, value)
        w.depth = 1
        try:
            digest = original(cls, value)
        except BaseException as e:
            w.error = str(e)
            w.error_type = type(e).__name__
            w.error_at = len(w.digests)
            raise
        finally:
            w.depth = 0
        w.digests.append(digest)
        return digest

    return hash


def wrap_random(original: Callable[..., str], local: CallState) -> Callable[..., str]:
    """`generate_random_fingerprint`, noting in the watch of the call it runs in that it ran."""

    @functools.wraps(original)
    def generate_random_fingerprint(*args: Any, **kwargs: Any) -> str:
        w = local.watch
        if w is not None:
            w.random = True
        return original(*args, **kwargs)

    return generate_random_fingerprint
