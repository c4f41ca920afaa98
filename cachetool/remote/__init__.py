"""The remote tier: results kept in an object store (S3, GCS, Azure through obstore), keyed by
fingerprint, each with a producer record written last; nothing is ever replaced, and a reader
uses a result only once every check passes (docs/remote.md). `client` (the configured remote),
`transfer` (records, `push`, `pull`, the tracer's hooks), `saved` (`save_to_disk` folders),
`step_leases` (a step's lease for `run --once`), `upkeep` (`ls`, `verify`, `gc` of a remote).

Layer: below `trace` (whose hooks call it), above `history` and `cache`. Nothing here imports the
client library until a remote is used.
"""
