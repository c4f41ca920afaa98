"""The remote tier: results kept in an object store (S3, GCS, Azure through obstore), keyed by
fingerprint, each with a producer record written last; nothing is ever replaced, and a reader
uses a result only once every check passes (docs/remote.md). `client` (the configured remote),
`record`, `transfer` (`push`, `pull`), `hook` (what the tracer calls), `fleet` (`ls`, `verify`,
`gc` of a remote).

Layer: below `trace` (whose hooks call it), above `history` and `cache`. Nothing here imports the
client library until a remote is used.
"""

from __future__ import annotations

from cachetool.remote.client import KEY_ENV, REMOTE_ENV, is_remote_url
from cachetool.remote.transfer import Pulled, Pushed, pull, push

__all__ = ["KEY_ENV", "REMOTE_ENV", "Pulled", "Pushed", "is_remote_url", "pull", "push"]
