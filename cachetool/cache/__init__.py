"""The cache-directory model: naming rules, cheap Arrow reads and the scan (no typer, no rich).

Owns what is on disk in a root and where cachetool's state lives: the scan and its `Entry`, the
read index, the naming rule (`lookup.resolve`), the pins file (`pins`), the ledger's folders and
the per-user registry of roots (`roots`). May import `fingerprint` and the base modules
(`errors`, `formatting`, `safejson`, `processes`, `annotations`, `hints`). What a higher layer
knows comes in as data: the ledger's usage (`scan_cache(usage=...)`) and live processes
(`scan_cache(liveness=...)`).
"""
