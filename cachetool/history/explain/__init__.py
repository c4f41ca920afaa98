"""Why was a step recomputed, and was a cache hit computed by code that has changed since?

Owns: `answer` (the typed answer: `ExplainReport`, `Reason` and its kinds), `view` (a ledger's
records indexed for comparisons), `reasons` (two records of a step compared), `stale` (stale hits,
and function source texts compared), `explainer` (a record, a fingerprint, a run explained:
`explain`, `explain_fingerprint`, `explain_run`).

Part of the `history` layer: may import `history`, `cache`, `fingerprint` and the base modules.
"""
