"""The cache-directory model: naming rules, cheap Arrow reads and the scan (no typer, no rich).

Owns what is on disk in a root and where cachetool's state lives: the scan and its `Entry`, the
read index, the naming rule (`lookup.resolve`), the pins file (`pins`), the ledger's folders and
the per-user registry of roots (`roots`). May import `fingerprint` and the base modules
(`errors`, `formatting`, `safejson`, `processes`, `annotations`, `hints`). What the ledger says
of an entry comes in as data (`scan_cache(usage=...)`); two imports still climb (`scan` reads the
ledger's usage when not given it, `nondata` asks `maintenance.liveness`), listed in pyproject.toml.
"""
