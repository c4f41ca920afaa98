"""Typed ledger records: one frozen class per record type, parsed once when a ledger is read.

The schema is documented in `cachetool.history.ledger`. Readers get these classes, never raw
dicts; writers build them and serialize them with `to_json()`. `parse.parse_record(obj)` turns
one decoded JSON object into a record or raises `fields.BadRecord` with a one-line reason; fields
a record does not know are kept in `extra`. Modules by family: `fields` (the field checks),
`parts` (the parts of a record), `base` (`LedgerRecord`), `steps`, `runs` (run markers),
`compacted` (a compacted ledger's marker and run summaries), `other` (source and gc records),
`parse` (the registry).

Part of `history`: imports only `cache` and the base modules.
"""
