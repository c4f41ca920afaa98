"""How sizes and times look, the same in every command (humanize is imported only when used)."""

from __future__ import annotations

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
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


def human_duration(seconds: float) -> str:
    """`3 hours`, `12 seconds`: a rounded span of time for people."""
    import humanize

    return str(humanize.naturaldelta(seconds))


def safe_text(text: str) -> str:
    """Make a string safe for a terminal: control characters (escape sequences) become visible
    `\\x1b`-style escapes, undecodable bytes in file names become `\\udcXX`-free replacements."""
    out = []
    for ch in text:
        o = ord(ch)
        if (o < 0x20 and ch not in "\t") or 0x7F <= o < 0xA0:
            out.append(f"\\x{o:02x}")
        elif 0xDC80 <= o <= 0xDCFF:  # surrogate-escaped byte from a non-UTF-8 file name
            out.append(f"\\x{o - 0xDC00:02x}")
        else:
            out.append(ch)
    return "".join(out)
