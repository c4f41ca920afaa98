"""`cachetool check-determinism`: run a pipeline twice and name what made its fingerprints differ.

Owns: `check` (`check_determinism`, `CheckOptions`: the runs, and what a stopped check leaves),
`process` (one run: its processes, output and progress), `waiter` (a run's interpreter started
ahead of its turn), `events` (a run's events file, typed), `analysis` (the runs aligned and
compared), `causes` (what makes one step differ), `report` (the result and its verdict), `render`
(its text forms) and `checkpoint` (`cachetool.checkpoint`).

A command layer: may import `maintenance`, `trace`, `history`, `cache`, `fingerprint` and the base
modules; not `cli`, `report` or `demo`.
"""
