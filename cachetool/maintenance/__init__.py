"""Keeping a cache tidy and whole: `gc`, `verify`, `pin`/`unpin`, and who is using a file
(`liveness`: `/proc`, leases, file locks, shared file systems).

May import `trace`, `history`, `cache`, `fingerprint` and the base modules; not `cli`,
`determinism` or `report`, which call it.
"""
