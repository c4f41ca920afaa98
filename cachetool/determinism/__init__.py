"""`cachetool check-determinism`: run a pipeline twice and name what made its fingerprints differ.

A command layer: may import `maintenance`, `trace`, `history`, `cache`, `fingerprint` and the base
modules; not `cli`, `report` or `demo`.
"""
