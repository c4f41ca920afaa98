"""`cachetool check-determinism`: `check` (the runs), `process` (one run), `waiter`, `analysis`
(the runs compared), `verdict` (the result and its text forms), `checkpoint`.

A command layer: may import `maintenance`, `trace`, `history`, `cache`, `fingerprint` and the base
modules; not `cli`, `report` or `demo_cache`.
"""
