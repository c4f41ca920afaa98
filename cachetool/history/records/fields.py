"""What a record is built from: the `BadRecord` error and the field checks every parser uses
(each returns the value or raises `BadRecord` naming the field)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


class BadRecord(ValueError):
    """A ledger line that is JSON but not a record this cachetool can read; the message says why."""


# ------------------------------------------------------------------------------------------
# Field checks: each returns the value or raises BadRecord naming the field
# ------------------------------------------------------------------------------------------


def _opt_str(d: Mapping[str, Any], key: str, where: str = "") -> str | None:
    v = d.get(key)
    if v is None or isinstance(v, str):
        return v
    raise BadRecord(f"'{where}{key}' is not a string")


def _opt_int(d: Mapping[str, Any], key: str, where: str = "") -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRecord(f"'{where}{key}' is not an integer")
    return v


def _int(d: Mapping[str, Any], key: str, default: int = 0, where: str = "") -> int:
    v = _opt_int(d, key, where)
    return default if v is None else v


def _opt_num(d: Mapping[str, Any], key: str, where: str = "") -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadRecord(f"'{where}{key}' is not a finite number")
    return float(v)


def _num(d: Mapping[str, Any], key: str, default: float = 0.0, where: str = "") -> float:
    v = _opt_num(d, key, where)
    return default if v is None else v


#: Later than this is not a time a record was written (year 5138): `datetime` cannot show it.
_MAX_TIME = 1e11


def _time(d: Mapping[str, Any]) -> float:
    t = _num(d, "time")
    if not 0 <= t < _MAX_TIME:
        raise BadRecord("'time' is not a time since the epoch")
    return t


def _bool(d: Mapping[str, Any], key: str, where: str = "") -> bool:
    v = d.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise BadRecord(f"'{where}{key}' is not true or false")
    return v


def _strs(d: Mapping[str, Any], key: str, where: str = "") -> tuple[str, ...]:
    v = d.get(key)
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise BadRecord(f"'{where}{key}' is not a list of strings")
    return tuple(v)


def _obj(d: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, Any] | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise BadRecord(f"'{where}{key}' is not an object")
    return v


def _objs(d: Mapping[str, Any], key: str, where: str = "") -> list[Mapping[str, Any]]:
    v = d.get(key)
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise BadRecord(f"'{where}{key}' is not a list of objects")
    return v
