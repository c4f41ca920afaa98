"""How times, ages, durations and sizes read, the same in every command (`cachetool.formatting`)."""

from __future__ import annotations

import time

import pytest

from cachetool.formatting import (
    fit_paths,
    human_age,
    human_size,
    local_time,
    short_age,
    short_duration,
    short_path,
    wrap_line,
)

HASH = "7067e4b2422ab4b7d61ccf25eb67c03d0df17a5264a8fa53f4593051b5adb555"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "0s"),
        (0, "0s"),
        (59.9, "59s"),
        (60, "1m"),
        (3 * 3600 + 59, "3h"),
        (2 * 86400, "2d"),
        (5 * 7 * 86400, "1mo"),
        (13 * 86400, "1w"),
        (400 * 86400, "1y"),
    ],
)
def test_short_age_rounds_down_to_its_largest_unit(seconds: float, text: str) -> None:
    """A table's age column: the largest unit that fits, never a future ("-5s") age."""
    assert short_age(seconds) == text


@pytest.mark.parametrize(("seconds", "text"), [(0.4544, "454 ms"), (12.46, "12.5 s"), (192, "3.2 min")])
def test_short_duration_picks_the_unit_a_person_reads(seconds: float, text: str) -> None:
    assert short_duration(seconds) == text


def test_human_age_and_local_time() -> None:
    """`3 hours ago` for people; a moment in the local time zone, with or without seconds."""
    assert human_age(3 * 3600 + 5) == "3 hours ago" and human_age(-1) == "now"
    assert human_age(1) == "1 second ago" and human_age(5400) == "1 hour ago"
    ts = time.mktime((2026, 11, 20, 10, 31, 5, 0, 0, -1))
    assert local_time(ts) == "2026-11-20 10:31:05"
    assert local_time(ts, seconds=False) == "2026-11-20 10:31"


@pytest.mark.parametrize("seconds", [0.5, 1, 59, 60, 3599, 5400, 86399, 86400 * 13, 86400 * 40, 86400 * 800])
def test_an_age_for_people_is_the_age_of_a_listing_in_words(seconds: float) -> None:
    """`show` (`1 hour ago`) and `ls` (`1h ago`) say the same number of the same unit."""
    words = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}
    short = short_age(seconds)
    n, unit = int(short.rstrip("smhdwoy")), short.lstrip("0123456789")
    assert human_age(seconds) == ("now" if n == 0 else f"{n} {words[unit]}{'' if n == 1 else 's'} ago")


def test_human_size_is_decimal_and_rounds_up_a_unit_at_1000() -> None:
    assert [human_size(n) for n in (None, 1, 999, 1000, 999_999, 3_100_000)] == [
        "",
        "1 Byte",
        "999 Bytes",
        "1.0 kB",
        "1.0 MB",
        "3.1 MB",
    ]


def test_short_path_keeps_names_whole_and_uses_tilde(monkeypatch: pytest.MonkeyPatch) -> None:
    """Long paths lose folders from the middle, never part of a name (a hash stays whole), and
    the home folder reads `~`."""
    monkeypatch.setenv("HOME", "/home/ana")
    path = f"/home/ana/.cache/huggingface/datasets/csv/default-7e98570819c37f81/0.0.0/{HASH}/cache-x.arrow"
    assert (
        short_path(path, None)
        == f"~/.cache/huggingface/datasets/csv/default-7e98570819c37f81/0.0.0/{HASH}/cache-x.arrow"
    )
    assert short_path(path, 100) == f"~/.cache/…/0.0.0/{HASH}/cache-x.arrow"
    assert short_path(path, 60) == "~/.cache/huggingface/datasets/csv/…/cache-x.arrow"
    assert short_path(path, 10) == "…/cache-x.arrow"
    assert short_path("/home/anabel/x", 5) == "/home/anabel/x"[:0] + "…/x"  # not the home folder
    assert short_path("/data/a", 3) == "/data/a"  # nothing to leave out


def test_wrap_line_breaks_only_at_spaces() -> None:
    line = f"  culprit in /srv/projects/pipeline/{HASH}/steps.py:12 differs between runs"
    pieces = wrap_line(line, 40)
    assert pieces == [
        "  culprit in",
        f"    /srv/projects/pipeline/{HASH}/steps.py:12",
        "    differs between runs",
    ]


def test_wrap_line_keeps_a_command_in_backticks_whole() -> None:
    """A hint like "move it aside with `cachetool verify --quarantine --cache-dir /data/hf`" is
    pasted from the terminal: the command in backticks stays on one line."""
    line = (
        "        hint: move it aside with `cachetool verify --quarantine --cache-dir /data/hf`; "
        "datasets will recompute it"
    )
    pieces = wrap_line(line, 80)
    assert pieces == [
        "        hint: move it aside with",
        "          `cachetool verify --quarantine --cache-dir /data/hf`; datasets will",
        "          recompute it",
    ]


def test_fit_paths_shortens_the_path_in_a_message_not_the_words() -> None:
    message = "cache directory not found: /srv/a/b/c/d/e/f/g/h/i/j/k/l/m/n/datasets."
    assert fit_paths(message, 50) == "cache directory not found: /srv/…/l/m/n/datasets."
    assert fit_paths(message, 200) == message


def test_a_wrapped_line_keeps_notes_in_parentheses_and_sizes_whole() -> None:
    """A lineage step wider than the terminal breaks between its parts, never inside its size
    (`42.2 kB`) or its runs (`(1 miss, 2 hits)`), at every width."""
    from cachetool.formatting import wrap_line

    step = "  6. map  upper @ pipeline.py:30  batched=True  ->  155b31e337929002  42.2 kB  (1 miss, 2 hits)"
    for width in range(40, len(step)):
        lines = wrap_line(step, width)
        text = "\n".join(lines)
        assert "42.2 kB" in text and "(1 miss, 2 hits)" in text, (width, lines)
        assert all(len(line) <= width for line in lines), (width, lines)
