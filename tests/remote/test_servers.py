"""The premise of the remote tier, on each real server the tests start: a write-once put
(`If-None-Match: *`) of a key that exists is refused, and the first bytes stay."""

from __future__ import annotations

import pytest

from tests.remote.conftest import Bucket


def test_a_second_write_once_put_is_refused(bucket: Bucket) -> None:
    """An object written once cannot be replaced by a conditional put: the server refuses it
    (412) and keeps the first bytes."""
    from botocore.exceptions import ClientError

    client, key = bucket.server.client(), f"{bucket.prefix}/a"
    client.put_object(Bucket=bucket.name, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=bucket.name, Key=key, Body=b"second", IfNoneMatch="*")
    assert bucket.get("a") == b"first"
