"""`cachetool report`: one self-contained HTML page that pictures a cache. Owns `data`
(`build_report`) and `html` (`write_report`: inline SVG, nothing fetched).

A command layer: may import `maintenance`, `trace`, `history`, `cache`, `fingerprint` and the base
modules; not `cli`, `determinism` or `demo_cache`.
"""
