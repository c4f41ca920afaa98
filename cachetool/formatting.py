"""How sizes and times look, the same in every command (humanize is imported only when used)."""

from __future__ import annotations

import math
from datetime import datetime, timezone


def human_size(n: int | None) -> str:
    """`3.1 MB` (decimal units, as `hf cache` and the `size>` filter use); "" for unknown."""
    if n is None:
        return ""
    import humanize

    return str(humanize.naturalsize(n))


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
