"""GitHub Actions workflow commands (`::error file=…,line=…::message`), for every command.

GitHub reads a message body as *data* and `file`, `line`, `title` as *properties*, with two
escaping rules (actions/toolkit `command.ts`): data escapes `%`, CR and LF; a property also
escapes `:` and `,`. A body escaped like a property reads `…(342 rows)%3A the writer …` in the
log. Other control characters (terminal escape sequences from file names) have no escape in that
scheme: they are written as visible `\\x1b`, never raw.
"""

from __future__ import annotations

from cachetool.formatting import safe_text

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
