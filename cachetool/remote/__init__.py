"""The remote tier: results kept in an object store (S3, GCS, Azure through obstore), keyed by
fingerprint, so that a step computed once on one machine is a cache hit on every other.

`<prefix>/<fp>/` holds the step's cache files (`cache-<fp>.arrow`, or its `num_proc` shards) and
a producer record (`record.json`: each file's size and xxh3, the versions, host, user, time and
call site; HMAC-signed when `CACHETOOL_REMOTE_KEY` is set), written last. Every object is written
once (`If-None-Match: *`): nothing is ever replaced. A reader uses a result only after every
checksum and the Arrow stream check pass, and never an unsigned record when a key is set.

* `client`: the configured remote (`CACHETOOL_REMOTE`, `--remote`) and its few operations;
* `record`: the producer record, its signature, and what a reader checks in it;
* `transfer`: `push` and `pull`, and the read-through hooks the tracer calls (`hook`);
* `fleet`: `ls` and `verify` of a remote.

Layer: below `trace` (whose hooks call it), above `history` (the ledger names a step's call
site) and `cache` (the naming rule, the Arrow header reader). Nothing here imports the client
library until a remote is used: `cachetool.remote` alone costs nothing.
"""

from __future__ import annotations

from cachetool.remote.client import KEY_ENV, REMOTE_ENV, is_remote_url
from cachetool.remote.transfer import Pulled, Pushed, pull, push

__all__ = ["KEY_ENV", "REMOTE_ENV", "Pulled", "Pushed", "is_remote_url", "pull", "push"]
