"""`cachetool report`: one self-contained HTML page that pictures a cache (a treemap of what takes
the space, the lineage of recorded runs, hit rate and time lost per call site, leftovers and
verify findings).

Owns: `data` (`build_report` gathers the data) and `html` (`write_report` gathers and writes it;
`write_page` draws the data as inline SVG: no chart library, nothing fetched).

A command layer: may import `maintenance`, `trace`, `history`, `cache`, `fingerprint` and the base
modules; not `cli`, `determinism` or `demo`.
"""
