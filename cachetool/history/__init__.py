"""The ledger: what traced runs recorded (records, segments, compaction), and what
is read from it: `lineage`, `show`, `explain`, `stats`, runs.

May import `cache`, `fingerprint` and the base modules; never `trace`, `maintenance` or the
commands.
"""
