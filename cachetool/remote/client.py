"""The configured remote (`CACHETOOL_REMOTE`, `--remote`: `s3://bucket/prefix`, `gs://...`,
`az://...`) and the few object-store operations the remote tier uses, through obstore (imported on
first use). Credentials come from the environment, else the AWS profile files (docs/remote.md).
"""

from __future__ import annotations

import configparser
import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cachetool.errors import CachetoolError, ExitCode

REMOTE_ENV = "CACHETOOL_REMOTE"
KEY_ENV = "CACHETOOL_REMOTE_KEY"
MAX_PUT_ENV = "CACHETOOL_REMOTE_MAX_PUT"
#: The largest object one PUT may write, by scheme: 5 GiB on AWS S3 (and most servers speaking
#: its protocol), 5,000 MiB for an Azure block blob; a GCS upload has no such limit. A write-once
#: put cannot be a multipart upload through obstore (it sends a conditional put as one request).
MAX_PUT = {"s3": 5 << 30, "az": 5000 << 20, "abfs": 5000 << 20}
#: The schemes of a remote, as a `Path` keeps them (`Path("s3://b/p")` reads `s3:/b/p`).
_SCHEMES = ("s3:/", "gs:/", "az:/", "abfs:/")


def is_remote_url(text: object) -> bool:
    """`text` names a remote (`s3://...`); `Path("s3://b/p")` reads `s3:/b/p` and counts too."""
    s = os.fspath(text) if isinstance(text, os.PathLike) else str(text)
    return s.startswith(_SCHEMES)


def remote_url(text: object) -> str:
    """The URL `text` names, the slash a `Path` collapsed put back (`s3:/b/p` -> `s3://b/p`)."""
    s = os.fspath(text) if isinstance(text, os.PathLike) else str(text)
    scheme, _, rest = s.partition(":")
    return f"{scheme}://{rest.lstrip('/')}".rstrip("/")


class RemoteError(CachetoolError):
    """The remote is not configured, not reachable, or refuses an operation (exit 2)."""


class RemoteRefused(CachetoolError):
    """What the remote holds failed a check (a checksum, the Arrow stream, the signature) and was
    not used; or an object of other bytes stands where a push would write (exit 1)."""

    exit_code = ExitCode.PROBLEMS_FOUND


class TooLarge(RemoteError):
    """A file is larger than one write-once put can write to this remote (nothing was sent)."""


@dataclass(frozen=True)
class Remote:
    """One remote: its URL, the obstore store rooted at its prefix, and the signing key."""

    url: str
    store: Any
    key: bytes | None = None

    @property
    def max_put(self) -> int | None:
        """The largest object one put writes here: `CACHETOOL_REMOTE_MAX_PUT` (bytes, or a size
        such as 5GB), else the scheme's (`MAX_PUT`); None: no limit."""
        given = os.environ.get(MAX_PUT_ENV)
        if given:
            from cachetool.cache.selection import BYTE_UNITS, parse_quantity

            return int(parse_quantity(given, BYTE_UNITS, MAX_PUT_ENV, given))
        return MAX_PUT.get(self.url.partition(":")[0])

    def check_sizes(self, files: Iterable[tuple[str, int]]) -> None:
        """TooLarge naming the first of `files` (name, size) that one put cannot write here."""
        limit = self.max_put
        for name, size in files:
            if limit is not None and size > limit:
                from cachetool.formatting import human_size

                raise TooLarge(
                    f"{name}: {human_size(size)}, over the {human_size(limit)} one write-once put can "
                    f"write to {self.url} (a conditional put is never multipart): nothing pushed"
                )

    def put_once(self, path: str, data: Any) -> bool:
        """Write `data` (bytes or a local `Path`) at `path` unless an object is there already
        (`If-None-Match: *`, one PUT); False when one is: it is never replaced."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.store, path, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        except Exception as e:
            raise self._failed("write", path, e) from None
        return True

    @contextlib.contextmanager
    def _reading(self, path: str) -> Iterator[None]:
        """A failed read of `path` as a RemoteError; FileNotFoundError (no object) as it is."""
        try:
            yield
        except FileNotFoundError:
            raise
        except Exception as e:
            raise self._failed("read", path, e) from None

    def get(self, path: str) -> bytes | None:
        """The object at `path`, None when there is none."""
        import obstore

        try:
            with self._reading(path):
                return bytes(obstore.get(self.store, path).bytes())
        except FileNotFoundError:
            return None

    def chunks(self, path: str) -> Iterator[bytes]:
        """The object at `path` in chunks as they arrive (FileNotFoundError when there is none)."""
        import obstore

        with self._reading(path):
            for chunk in obstore.get(self.store, path):
                yield bytes(chunk)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes `start` to `end` (exclusive) of the object at `path`."""
        import obstore

        with self._reading(path):
            return bytes(obstore.get_range(self.store, path, start=start, end=end))

    def list(self, prefix: str | None = None) -> Iterator[dict[str, Any]]:
        """Every object under `prefix` (all of the remote's when None): `path`, `size`,
        `last_modified`, paths relative to the remote's prefix."""
        import obstore

        try:
            for batch in obstore.list(self.store, prefix=prefix, chunk_size=1000):
                yield from batch
        except Exception as e:
            raise self._failed("list", prefix or "", e) from None

    def delete(self, path: str) -> None:
        """Remove the object at `path` (none there: nothing happens)."""
        import obstore

        try:
            obstore.delete(self.store, path)
        except FileNotFoundError:
            return
        except Exception as e:
            raise self._failed("remove", path, e) from None

    def _failed(self, what: str, path: str, e: Exception) -> RemoteError:
        why = short_error(e)
        if "/latest/api/token" in why and not _credentials_given():  # the client's last resort
            why += (
                "; no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                "AWS_PROFILE for a profile of ~/.aws/credentials"
            )
        return RemoteError(f"cannot {what} {'/'.join(p for p in (self.url, path) if p)}: {why}")


def short_error(e: Exception) -> str:
    """The client library's error in one line: its first, without the server's XML body (but
    with the S3 error code it names)."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    code = re.search(r"<Code>([^<]{1,80})</Code>", text)
    first = first.split(": <?xml", 1)[0].strip()
    return first[:300] + (f" ({code.group(1)})" if code else "")


def open_remote(url: str | None = None, key: str | None = None) -> Remote:
    """The remote `url` names, else `CACHETOOL_REMOTE`; signed with `key`, else
    `CACHETOOL_REMOTE_KEY` (none when both are empty). RemoteError when none is configured, the
    URL is not one, or the client library is missing."""
    url = url or os.environ.get(REMOTE_ENV) or None
    if url is None:
        raise RemoteError(f"no remote: set {REMOTE_ENV}=s3://bucket/prefix or pass --remote")
    if not is_remote_url(url):
        raise RemoteError(f"not a remote URL: {url!r} (s3://bucket/prefix, gs://..., az://...)")
    url = remote_url(url)
    try:
        from obstore.store import from_url
    except ImportError:
        raise RemoteError('the remote tier needs obstore: pip install "cachetool[remote]"') from None
    config = _aws_config() if url.startswith("s3://") else {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or config.get("endpoint") or ""
    # A remote that does not answer costs a run seconds, not the client's default of minutes.
    options: Any = {"connect_timeout": "5s", "allow_http": endpoint.startswith("http://")}
    retry: Any = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}
    try:
        store = from_url(url, client_options=options, retry_config=retry, **config)  # type: ignore[call-overload]
    except Exception as e:
        raise RemoteError(f"cannot use the remote {url}: {short_error(e)}") from None
    secret = key if key is not None else os.environ.get(KEY_ENV)
    return Remote(url, store, secret.encode() if secret else None)


def _credentials_given() -> bool:
    """Whether the environment or an AWS config file gives credentials (else the client asks the
    instance metadata service, which answers only on a cloud machine)."""
    given = ["AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"]
    given.append("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    return any(os.environ.get(k) for k in given) or "access_key_id" in _aws_config()


def _aws_config() -> dict[str, str]:
    """What `~/.aws/credentials` and `~/.aws/config` say for the profile, for what the
    environment does not (obstore reads the environment itself)."""
    out: dict[str, str] = {}
    profile = os.environ.get("AWS_PROFILE") or "default"
    files = (
        ("AWS_CONFIG_FILE", "~/.aws/config", "default" if profile == "default" else f"profile {profile}"),
        ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials", profile),
    )
    keys = {
        "aws_access_key_id": "access_key_id",
        "aws_secret_access_key": "secret_access_key",
        "aws_session_token": "session_token",
        "region": "region",
        "endpoint_url": "endpoint",
    }
    for env, default, section in files:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(os.path.expanduser(os.environ.get(env) or default))
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        if parser.has_section(section):
            for name, value in parser.items(section):
                if name in keys:
                    out[keys[name]] = value
    if os.environ.get("AWS_ACCESS_KEY_ID"):  # the environment's credentials win, as in the AWS CLI
        for k in ("access_key_id", "secret_access_key", "session_token"):
            out.pop(k, None)
    if os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"):
        out.pop("region", None)
    if os.environ.get("AWS_ENDPOINT_URL"):
        out.pop("endpoint", None)
    return out
