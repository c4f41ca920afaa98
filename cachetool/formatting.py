"""How sizes and times look, the same in every command (humanize is imported only when used)."""

from __future__ import annotations

import math
from datetime import datetime, timezone


def human_size(n: int | None) -> str:
    """`3.1 MB` (decimal units, as `hf cache` and the `size>` filter use); "" for unknown.

    The text of `humanize.naturalsize(n)`, written here: a listing formats one per entry, and
    humanize's general version (any base, translations) took a third of a human listing."""
    if n is None:
        return ""
    if n == 1 or n == -1:
        return f"{n} Byte"
    size = abs(n)
    if size < 1000:
        return f"{int(n)} Bytes"
    exp = 1
    while exp < len(_DECIMAL) and size >= 1000 ** (exp + 1):
        exp += 1
    # The unit is chosen from the exact count; rounding the mantissa may reach 1000 (999,999
    # bytes are 999.999 kB, "1000.0 kB"): then the next unit up ("1.0 MB"), as humanize does.
    if exp < len(_DECIMAL) and abs(float("%.1f" % (size / 1000**exp))) >= 1000:
        exp += 1
    return "%.1f" % (n / 1000**exp) + " " + _DECIMAL[exp - 1]


_DECIMAL = ("kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB", "RB", "QB")


def iso_time(ts: float | None) -> str | None:
    """UTC ISO 8601 to the second, as every `--json` document writes times."""
    if ts is None:
        return None
    # Files of one cache share their seconds: a listing of 100,000 files formats each second
    # once. A fraction this close to the next second may round up to it, so it is not shared.
    second = math.floor(ts)
    if ts - second < 0.9999995:
        text = _ISO_SECONDS.get(second)
        if text is None:
            if len(_ISO_SECONDS) > 100_000:
                _ISO_SECONDS.clear()
            text = _ISO_SECONDS[second] = _iso(second)
        return text
    return _iso(ts)


_ISO_SECONDS: dict[int, str] = {}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


def human_duration(seconds: float) -> str:
    """`3 hours`, `12 seconds`: a rounded span of time for people."""
    import humanize

    return str(humanize.naturaldelta(seconds))
