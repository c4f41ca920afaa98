"""Typed ledger records: one class per record type (`steps`, `other`), their parts (`parts`), all
read and written from their dataclass fields (`base`). A class registers when its module is
imported: `cachetool.history.ledger.parse_record`, the reader, imports every one. Part of `history`:
imports only `cache` and the base modules.
"""
