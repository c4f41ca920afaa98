"""Reading the small JSON files of a cache (`dataset_info.json`, `state.json`, cachetool's own
state) without trusting them: regular files only (a FIFO is never waited on, `/dev/zero` behind a
symlink is never read), a size cap, and nesting too deep to parse is a bad file like any other;
and the JSON form of typed values (`json_fields`)."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Callable, Container
from enum import Enum
from pathlib import PurePath
from typing import Any

#: No metadata file of a cache comes near this (a dataset_info.json of many configs is a few MB).
MAX_BYTES = 64 * 1024 * 1024


class BadJsonFile(ValueError):
    """The file exists but is not a JSON document this reads; the message says why."""


def read_opened(opener: Callable[[], int], max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file `opener()` opens (`read_open_file`): FileNotFoundError when
    it is missing, BadJsonFile (with the reason) when it cannot be opened or read whole."""
    try:
        fd = opener()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise BadJsonFile(e.strerror or str(e)) from None
    try:
        return read_open_file(fd, max_bytes)
    finally:
        os.close(fd)


def read_open_file(fd: int, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the open file `fd`, a regular file of at most `max_bytes`, read with one
    `read()` sized from the stat; BadJsonFile (with the reason) otherwise."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadJsonFile("not a regular file")
        if st.st_size > max_bytes:
            raise BadJsonFile(f"{st.st_size} bytes, more than any such file holds")
        # Sized from the stat (one more byte tells a file that grew meanwhile): asking for the
        # cap would allocate all of it up front.
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(st.st_size + 1)
        if len(data) > max_bytes:
            raise BadJsonFile(f"{len(data)} bytes, more than any such file holds")
        return data
    except OSError as e:
        raise BadJsonFile(str(e).splitlines()[0][:200]) from None


def read_json_file(path: str | os.PathLike[str], max_bytes: int = MAX_BYTES) -> Any:
    """The parsed document; FileNotFoundError when the file is missing, BadJsonFile otherwise."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    return _loads(read_opened(lambda: os.open(path, flags), max_bytes))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this reads")


def parse_json(data: bytes | str) -> Any:
    """The document `data` holds, strictly: not UTF-8, not JSON, nested too deeply, or holding
    `NaN`/`Infinity` (which JSON does not have, but Python's parser accepts) is BadJsonFile."""
    return _loads(data, parse_constant=_no_constant)


def _loads(data: bytes | str, **options: Any) -> Any:
    try:
        return json.loads(data, **options)
    except RecursionError:
        raise BadJsonFile("nested too deeply") from None
    except ValueError as e:  # UnicodeDecodeError included
        raise BadJsonFile(str(e).splitlines()[0][:200]) from None


def json_value(value: Any) -> Any:
    """A value as JSON shows it: a typed value by its `to_json` (or `to_dict`; a dataclass without
    either by its fields), a tuple or list as a list of such values, a path as its text, an enum
    member as its value."""
    if isinstance(value, (tuple, list)):
        return [json_value(v) for v in value]
    if isinstance(value, PurePath):
        return os.fsdecode(value)
    if isinstance(value, Enum):
        return value.value
    to_json = getattr(value, "to_json", None) or getattr(value, "to_dict", None)
    if to_json is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_fields(value)
    return to_json() if to_json is not None else value


def json_fields(obj: Any, *names: str, skip: Container[str] = ()) -> dict[str, Any]:
    """The attributes `names` of `obj` (fields or properties; by default every field of the
    dataclass `obj` but `skip`) as JSON values (`json_value`), in that order."""
    names = names or tuple(f.name for f in dataclasses.fields(obj) if f.name not in skip)
    return {name: json_value(getattr(obj, name)) for name in names}
