"""How times, ages, durations and sizes read, the same in every command (`cachetool.formatting`)."""

from __future__ import annotations

import time

import pytest

from cachetool.formatting import human_age, human_size, local_time, short_age, short_duration


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
    ts = time.mktime((2026, 11, 20, 10, 31, 5, 0, 0, -1))
    assert local_time(ts) == "2026-11-20 10:31:05"
    assert local_time(ts, seconds=False) == "2026-11-20 10:31"


def test_human_size_is_decimal_and_rounds_up_a_unit_at_1000() -> None:
    assert [human_size(n) for n in (None, 1, 999, 1000, 999_999, 3_100_000)] == [
        "",
        "1 Byte",
        "999 Bytes",
        "1.0 kB",
        "1.0 MB",
        "3.1 MB",
    ]
