"""Why was a step recomputed, and was a cache hit computed by code that has changed since?

`datasets` recomputes a step when its fingerprint is new, and a fingerprint is a hash of the parent
fingerprint, the transform and its arguments. The ledger records, per step, each argument's
digest and (for steps that computed their result) a bounded summary of its hash tree, plus the
source of the user's function and of the helpers it calls. So a recorded step can be compared
with its *siblings* — earlier records of the same call site (or function) with another
fingerprint — and the difference named:

========================  ==================================================================
kind                      meaning
========================  ==================================================================
``argument``              an argument's value changed (``fn_kwargs['threshold']`` 0.5 → 0.6)
``function``              another function was passed
``function-source``       the function's code changed (with the lines)
``source-file``           the same function from another file (the script renamed or moved)
``nondeterministic``      the same code hashes differently by itself (a frozenset in hash-seed
                          order, a time or address made at run time): not a change of the user's
``cache-state``           an object an earlier step changed while it ran, that step computed in
                          one run and loaded in the other: not a change of the user's
``non-semantic``          only arguments that do not change the result (``writer_batch_size``)
``random``                `datasets` could not hash an argument and used a random fingerprint
``fingerprint-given``     the caller passed another ``new_fingerprint=``
``source``                the source dataset changed (an input file was modified)
``input``                 the input changed upstream and no recorded step says why
``versions``              `datasets` hashes the step differently (another release)
``same-fingerprint``      the fingerprint is not new: the cache file was gone (removed by gc, deleted, or
                          ``load_from_cache_file=False``)
``concurrent``            another run (on this or another host) was computing the same
                          fingerprint at the same time: neither could reuse the other's file
``first-run``             nothing to compare with
``unexplained``           no recorded argument differs
========================  ==================================================================

A change upstream is reported with the step where it happened (`Reason.upstream`). The kinds are
`ReasonKind` values; messages are rendered from them, never read back.

*Stale hits* are the opposite failure: a function imported from the user's own module is pickled
by reference, so editing it keeps the fingerprint and `datasets` reuses the old result.
`stale_hits(root)` finds cache entries whose computing code (the function, or a helper it calls)
changed since — by a later recorded run, or in the source file on disk now.

The package: `model` (the answer, typed), `view` (the records, indexed), `reasons` (comparing two
records of a step), `sources` (function source texts), `stale` (stale hits), `steps` (explaining
a record, a fingerprint, a run).
"""

from cachetool.history.explain.model import (
    UNCACHED_HINT,
    UNCACHED_TEXT,
    ExplainMode,
    ExplainReport,
    LineChange,
    NoRecords,
    Reason,
    ReasonKind,
    SourceChange,
    StaleHit,
    StepExplanation,
    StepRef,
    StepStatus,
    UncachedReason,
    UncachedStep,
)
from cachetool.history.explain.reasons import NON_SEMANTIC, NONDETERMINISTIC_KINDS, compare
from cachetool.history.explain.sources import diff_lines, function_source
from cachetool.history.explain.stale import stale_hits
from cachetool.history.explain.steps import (
    explain,
    explain_fingerprint,
    explain_record,
    explain_run,
    last_run,
    resolve_fingerprint,
)
from cachetool.history.explain.view import LedgerView, load_view

__all__ = [
    "NONDETERMINISTIC_KINDS",
    "NON_SEMANTIC",
    "UNCACHED_HINT",
    "UNCACHED_TEXT",
    "ExplainMode",
    "ExplainReport",
    "LedgerView",
    "LineChange",
    "NoRecords",
    "Reason",
    "ReasonKind",
    "SourceChange",
    "StaleHit",
    "StepExplanation",
    "StepRef",
    "StepStatus",
    "UncachedReason",
    "UncachedStep",
    "compare",
    "diff_lines",
    "explain",
    "explain_fingerprint",
    "explain_record",
    "explain_run",
    "function_source",
    "last_run",
    "load_view",
    "resolve_fingerprint",
    "stale_hits",
]
