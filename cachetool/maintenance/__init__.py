"""Keeping a cache tidy and whole: `gc`, `verify`, `pin`/`unpin`, and who is using a file
(`liveness`, `locks`).

May import `trace`, `history`, `cache`, `fingerprint` and the base modules; not `cli`,
`determinism` or `report`, which call it.
"""
