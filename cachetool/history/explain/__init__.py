"""Why was a step recomputed, and was a cache hit computed by code that has changed since?
`answer` (the typed answer), `view` (records indexed for comparisons), `reasons` (two records of
a step compared), `stale` (stale hits), `explainer` (`explain`, `explain_fingerprint`,
`explain_run`).
"""
