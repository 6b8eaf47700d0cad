"""The next maintenance window (core.maintenance): pure, no database. Times are checked in UTC
against the wall clock of the window's own time zone."""

from __future__ import annotations

from datetime import UTC, datetime, time

import pytest

from core.maintenance import Window, WindowError, is_open, next_opening

BERLIN = "Europe/Berlin"
MON, TUE, WED, THU, FRI, SAT, SUN = range(7)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def window(days: set[int], start: str, end: str, tz: str = BERLIN) -> Window:
    return Window(frozenset(days), time.fromisoformat(start), time.fromisoformat(end), tz)


@pytest.mark.parametrize(
    "days,start,end,now,opens,closes",
    [
        # Saturday 02:00-04:00 Berlin (CET, UTC+1), asked on Friday 2026-12-04 at noon UTC.
        ({SAT}, "02:00", "04:00", utc(2026, 12, 4, 12), utc(2026, 12, 5, 1), utc(2026, 12, 5, 3)),
        # Asked inside it: the window open now (it opened an hour ago).
        ({SAT}, "02:00", "04:00", utc(2026, 12, 5, 2), utc(2026, 12, 5, 1), utc(2026, 12, 5, 3)),
        # Asked as it closes: the next Saturday.
        ({SAT}, "02:00", "04:00", utc(2026, 12, 5, 3), utc(2026, 12, 12, 1), utc(2026, 12, 12, 3)),
        # Across midnight: Friday 23:00 - Saturday 02:00, asked on Saturday 00:30 Berlin: open now.
        ({FRI}, "23:00", "02:00", utc(2026, 12, 4, 23, 30), utc(2026, 12, 4, 22), utc(2026, 12, 5, 1)),
        # ... and asked on Friday afternoon: tonight.
        ({FRI}, "23:00", "02:00", utc(2026, 12, 4, 15), utc(2026, 12, 4, 22), utc(2026, 12, 5, 1)),
        # Weekdays: asked on Friday after its window, the next is Monday's.
        ({MON, TUE, WED, THU, FRI}, "01:00", "03:00", utc(2026, 12, 4, 5), utc(2026, 12, 7, 0), utc(2026, 12, 7, 2)),
        # Summer time (CEST, UTC+2): the same wall clock is an hour earlier in UTC.
        ({SAT}, "02:00", "04:00", utc(2026, 7, 1), utc(2026, 7, 4, 0), utc(2026, 7, 4, 2)),
    ],
)
def test_next_opening(days, start, end, now, opens, closes):
    assert next_opening(window(days, start, end), now) == (opens, closes)


def test_a_window_over_the_spring_forward_jump_is_an_hour_shorter():
    """2026-03-29, Berlin: 02:00 CET becomes 03:00 CEST. Sunday 01:00-04:00 lasts two real hours."""
    opens, closes = next_opening(window({SUN}, "01:00", "04:00"), utc(2026, 3, 28, 12))
    assert (opens, closes) == (utc(2026, 3, 29, 0), utc(2026, 3, 29, 2))


def test_a_start_inside_the_spring_forward_gap_happens_once_the_clock_passes_it():
    """02:30 does not exist that night: the window opens at 03:30 CEST (01:30 UTC)."""
    opens, _ = next_opening(window({SUN}, "02:30", "05:00"), utc(2026, 3, 28, 12))
    assert opens == utc(2026, 3, 29, 1, 30)


def test_a_start_that_happens_twice_in_autumn_is_the_first_one():
    """2026-10-25, Berlin: 03:00 CEST falls back to 02:00 CET; 02:30 happens at 00:30 and 01:30 UTC."""
    opens, closes = next_opening(window({SUN}, "02:30", "04:00"), utc(2026, 10, 24, 12))
    assert (opens, closes) == (utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 3))


def test_a_window_inside_the_gap_moves_on_by_the_gap():
    """Sunday 02:10-02:50 on the spring-forward night happens at 03:10-03:50 CEST."""
    assert next_opening(window({SUN}, "02:10", "02:50"), utc(2026, 3, 28, 12)) == (
        utc(2026, 3, 29, 1, 10),
        utc(2026, 3, 29, 1, 50),
    )


def test_a_window_the_jump_swallows_does_not_happen_that_day():
    """Sunday 02:30-03:00: its start moves to 03:30 CEST, after its end (03:00 CEST): next week's."""
    opens, _ = next_opening(window({SUN}, "02:30", "03:00"), utc(2026, 3, 28, 12))
    assert opens == utc(2026, 4, 5, 0, 30)


def test_is_open():
    w = window({SAT}, "02:00", "04:00")
    assert is_open(w, utc(2026, 12, 5, 1, 30)) and not is_open(w, utc(2026, 12, 5, 3, 30))


@pytest.mark.parametrize(
    "days,start,end,tz,message",
    [
        (set(), "02:00", "04:00", BERLIN, "weekday"),
        ({7}, "02:00", "04:00", BERLIN, "weekday"),
        ({MON}, "02:00", "02:00", BERLIN, "differ"),
        ({MON}, "02:00", "04:00", "Mars/Olympus", "time zone"),
        ({MON}, "02:00", "04:00", "../../etc/passwd", "time zone"),
    ],
)
def test_impossible_windows_are_refused_with_the_reason(days, start, end, tz, message):
    with pytest.raises(WindowError, match=message):
        window(days, start, end, tz)


def test_a_naive_now_is_refused():
    with pytest.raises(ValueError, match="aware"):
        next_opening(window({MON}, "01:00", "02:00"), datetime(2026, 12, 4, 12))  # noqa: DTZ001
