"""How sizes, times, paths and GitHub annotations look, the same in every command (humanize is
imported only when used)."""

from __future__ import annotations

import math
import os
import time
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


def local_time(ts: float | None, *, seconds: bool = True) -> str:
    """`2026-11-20 10:31:05` (`seconds=False`: `2026-11-20 10:31`) in local time; `?` for unknown."""
    if not isinstance(ts, (int, float)):
        return "?"
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def clock_time(ts: float | None) -> str:
    """`10:31` today, else `2026-11-20 10:31` (local time); `?` for unknown."""
    if isinstance(ts, (int, float)) and datetime.fromtimestamp(ts).date() == datetime.now().date():
        return datetime.fromtimestamp(ts).strftime("%H:%M")
    return local_time(ts, seconds=False)


def short_duration(seconds: float) -> str:
    """`340 ms`, `12.5 s`, `3.2 min`: how long a step took."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def time_ago(ts: float | None, now: float | None = None) -> str:
    """`3 hours ago`: how long before `now` (default: the present) the time `ts` was; "" for None."""
    if ts is None:
        return ""
    return human_age((now or time.time()) - ts)


def compact_duration(seconds: float) -> str:
    """`30d`, `1h`, `90s`: the shortest exact form, as duration options are written."""
    s = int(seconds)
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"


def compact_age(seconds: float) -> str:
    """`42s`, `16m`, `3h`, `2d`, `5w`: an age rounded down to its largest unit, in the units of
    `compact_duration` (gc's reasons set it beside an option value such as `--older-than 30d`)."""
    return _in_largest_unit(seconds, _AGE_UNITS[2:])


def human_age(seconds: float) -> str:
    """`3 hours ago`, `1 second ago`, `now`: how long ago something happened, for people; rounded
    down to its largest unit, as `short_age` (`1h ago` in a listing is `1 hour ago` here)."""
    s = int(seconds)
    if s < 1:
        return "now"
    for (_, size), word in zip(_AGE_UNITS, _AGE_WORDS, strict=True):
        if s >= size:
            n = s // size
            return f"{n} {word}{'' if n == 1 else 's'} ago"
    return f"{s} second{'' if s == 1 else 's'} ago"


#: The units of `short_age`, largest first (a month is 30 days, a year 365).
_AGE_UNITS = (("y", 365 * 86400), ("mo", 30 * 86400), ("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60))
_AGE_WORDS = ("year", "month", "week", "day", "hour", "minute")


def short_age(seconds: float) -> str:
    """`42s`, `5m`, `3h`, `2d`, `5w`, `4mo`, `1y`: an age rounded down to its largest unit,
    narrow enough for a table column."""
    return _in_largest_unit(seconds, _AGE_UNITS)


def _in_largest_unit(seconds: float, units: tuple[tuple[str, int], ...]) -> str:
    s = max(0, int(seconds))
    for unit, size in units:
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def safe_text(text: str) -> str:
    """Make a string safe for a terminal: control characters (escape sequences) become visible
    `\\x1b`-style escapes, undecodable bytes in file names become `\\udcXX`-free replacements."""
    if text.isprintable():  # no control character, no surrogate: nothing to escape (the common case)
        return text
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


def short_path(path: str | os.PathLike[str], width: int | None = 80) -> str:
    """A path as a person reads it: the home folder as `~`, and when longer than `width`, the
    middle folders replaced by `…`. Names are never cut (a fingerprint or hash stays whole): at
    worst only `…/` and the last name remain, even if that is wider.

    `short_path("/home/me/.cache/huggingface/datasets/csv/default-1f2e/0.0.0/9a8b/cache-7a57.arrow",
    50)` is `~/.cache/…/0.0.0/9a8b/cache-7a57.arrow`.
    """
    text = os.fsdecode(path)
    home = os.path.expanduser("~")
    if home not in ("", "/") and (text == home or text.startswith(home.rstrip("/") + "/")):
        text = "~" + text[len(home.rstrip("/")) :]
    if width is None or len(text) <= width:
        return text
    parts = text.split("/")
    if len(parts) < 3:
        return text
    # The first name (`~`, or the top folder) and the last always; then trailing names (the
    # nearest folders say most), then leading ones, while they fit.
    first = 2 if parts[0] == "" else 1
    head, middle, tail = parts[:first], parts[first:-1], [parts[-1]]
    while middle and len("/".join([*head, "…", middle[-1], *tail])) <= width:
        tail.insert(0, middle.pop())
    while middle and len("/".join([*head, middle[0], "…", *tail])) <= width:
        head.append(middle.pop(0))
    if not middle:
        return "/".join([*head, *tail])
    shortened = "/".join([*head, "…", *tail])
    return shortened if len(shortened) <= width else "…/" + parts[-1]


def wrap_line(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` columns, broken only at spaces (a path, a hash or a
    command in backticks is never split, so it pastes whole; one wider than `width` stands on its
    own line; nor are a short note in parentheses, `(1 miss, 2 hits)`, and a size, `42.2 kB`),
    continuation lines indented two more than the first."""
    if len(text) <= width:
        return [text]
    import re
    import textwrap

    glue = "\x00"  # a space inside backticks, kept from textwrap
    body = text.lstrip(" ")
    lead = text[: len(text) - len(body)]
    body = re.sub(
        r"`[^`]*`|\([^()`]{1,24}\)|\b\d+(?:\.\d+)? (?:Bytes|[kMGT]B)\b",
        lambda m: m.group(0).replace(" ", glue),
        body,
    )
    lines = textwrap.wrap(
        body,
        width,
        initial_indent=lead,
        subsequent_indent=lead + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line.replace(glue, " ") for line in lines] or [text]


def fit_paths(message: str, width: int) -> str:
    """A one-line message made to fit `width` columns by shortening the paths in it (`~` for the
    home folder, middle folders as `…`); the words and the names of files stay whole."""
    if len(message) <= width:
        return message
    words = message.split(" ")
    paths = sorted((i for i, w in enumerate(words) if "/" in w), key=lambda i: -len(words[i]))
    for i in paths:
        over = len(" ".join(words)) - width
        if over <= 0:
            break
        word = words[i]
        trail = len(word) - len(word.rstrip(".,:;)'\""))
        core, end = (word[:-trail], word[-trail:]) if trail else (word, "")
        words[i] = short_path(core, max(1, len(core) - over)) + end
    return " ".join(words)


# GitHub Actions workflow commands (`::error file=…,line=…::message`), for every command.
#
# GitHub reads a message body as *data* and `file`, `line`, `title` as *properties*, with two
# escaping rules (actions/toolkit `command.ts`): data escapes `%`, CR and LF; a property also
# escapes `:` and `,`. A body escaped like a property reads `…(342 rows)%3A the writer …` in the
# log. Other control characters (terminal escape sequences from file names) have no escape in that
# scheme: they are written as visible `\x1b`, never raw.
LEVELS = ("error", "warning", "notice")


def escape_data(text: str) -> str:
    """A message body: `%`, CR, LF escaped; other control characters made visible."""
    return safe_text(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def escape_property(text: str) -> str:
    """A property value: as data, plus `:` and `,`."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(
    level: str, message: str, *, file: str | None = None, line: int | None = None, title: str | None = None
) -> str:
    """One workflow command line: `::<level> file=…,line=…,title=…::<message>`."""
    if level not in LEVELS:
        raise ValueError(f"annotation level must be one of {', '.join(LEVELS)}, not {level!r}")
    props = {"file": file, "line": line, "title": title}
    given = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{level}{' ' + given if given else ''}::{escape_data(message)}"
