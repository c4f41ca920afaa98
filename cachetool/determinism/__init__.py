"""`cachetool check-determinism`: run a pipeline twice and name what made its fingerprints differ.

Owns: `check` (`check_determinism`, `CheckOptions`: the runs, and what a stopped check leaves),
`process` (one run: its processes, output and progress), `waiter` (a run's interpreter started
ahead of its turn), `analysis` (the runs aligned and compared, what makes one step differ),
`report` (a run's events, the result and its verdict), `render` (its text forms) and
`checkpoint` (`cachetool.checkpoint`).

A command layer: may import `maintenance`, `trace`, `history`, `cache`, `fingerprint` and the base
modules; not `cli`, `report` or `demo`.
"""
