"""Typed ledger records: one frozen dataclass per record type, parsed once when a ledger is read.

The schema is documented in `cachetool.history.ledger`. Readers get these classes, never raw
dicts; writers build them and serialize them with `to_json()`. `parse.parse_record(obj)` turns
one decoded JSON object into a record or raises `base.BadRecord` with a one-line reason; fields
a record does not know are kept in `extra`. `base` reads and writes every record and part from
its dataclass fields; the record types are in `steps`, `runs` (run markers), `compacted` (a
compacted ledger's marker and run summaries) and `other` (source and gc records), their parts in
`parts`.

Part of `history`: imports only `cache` and the base modules.
"""
