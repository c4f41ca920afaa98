"""Why was a step recomputed, and was a cache hit computed by code that has changed since?
`answer` (the typed answer), `reasons` (two records of a step compared, on the ledger's index
`cachetool.history.graph.StepGraph`), `stale` (stale hits), `explainer` (`explain`,
`explain_fingerprint`, `explain_run`).
"""
