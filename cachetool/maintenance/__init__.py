"""Keeping a cache tidy and whole: `gc`, `verify`, `pin`/`unpin`, who is using a file
(`liveness`: `/proc`, leases, file locks, shared file systems), and `fleet` (`merge`: the
`ls`/`verify` documents of many jobs or hosts joined).

May import `trace`, `history`, `cache`, `fingerprint` and the base modules; not `cli`,
`determinism` or `report`, which call it.
"""
