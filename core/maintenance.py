"""A weekly maintenance window and the next time it is open: pure, no Django.

A window is a set of weekdays, a start and an end (wall-clock times in its time zone). It opens on
each listed day at `start` and closes at `end` that day, or the next day when `end` is not after
`start` (a window across midnight: Fri 23:00-02:00 opens on Friday, closes on Saturday).

Daylight saving time: the times are wall-clock times. A start that does not exist on a spring-forward
day (02:30 when clocks jump from 02:00 to 03:00) happens as soon as the clock passes it, one gap later
(03:30), and so does an end; a window the jump swallows (its start moves past its end) does not
happen that day. A time that happens twice on a fall-back day counts the first time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


class WindowError(ValueError):
    """A window that cannot be: no day, equal start and end, an unknown time zone."""


@dataclass(frozen=True)
class Window:
    weekdays: frozenset[int]  # 0 = Monday .. 6 = Sunday: the days the window opens on
    start: time
    end: time
    tz: str  # an IANA time zone name, e.g. "Europe/Berlin"

    def __post_init__(self) -> None:
        if not self.weekdays or not self.weekdays <= set(range(7)):
            raise WindowError("Pick at least one weekday (0 = Monday .. 6 = Sunday).")
        if self.start == self.end:
            raise WindowError("The window's start and end must differ.")
        zone_of(self.tz)

    def describe(self) -> str:
        days = ", ".join(WEEKDAYS[d] for d in sorted(self.weekdays))
        overnight = " (next day)" if self.end <= self.start else ""
        return f"{days} {self.start:%H:%M}-{self.end:%H:%M}{overnight} {self.tz}"


def zone_of(name: str) -> ZoneInfo:
    """The time zone called `name`; WindowError for anything the tz database does not know."""
    if not name or name not in _zones():
        raise WindowError(f"{name!r} is not a time zone of the tz database (e.g. Europe/Berlin, UTC).")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise WindowError(f"{name!r} is not a time zone of the tz database.") from exc


def _zones() -> set[str]:
    global _ZONES
    if _ZONES is None:
        _ZONES = available_timezones() | {"UTC"}
    return _ZONES


_ZONES: set[str] | None = None


def _wall(day: date, at: time, zone: ZoneInfo) -> datetime:
    """`day` at wall-clock `at` in `zone`, as UTC: a time inside a spring-forward gap moves on by
    the gap (fold=0 reads it with the offset before the jump), a doubled one is the first."""
    return datetime.combine(day, at, tzinfo=zone).astimezone(UTC)


def opening_on(window: Window, day: date) -> tuple[datetime, datetime]:
    """The window that opens on `day` (local), as (opens, closes) in UTC; `day` need not be one
    of its weekdays."""
    zone = zone_of(window.tz)
    closes_on = day + timedelta(days=1) if window.end <= window.start else day
    return _wall(day, window.start, zone), _wall(closes_on, window.end, zone)


def next_opening(window: Window, now: datetime) -> tuple[datetime, datetime]:
    """The window open at `now` (its opening may be earlier than `now`), or else the next one, as
    (opens, closes) in UTC. `now` must be aware."""
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    today = now.astimezone(zone_of(window.tz)).date()
    for offset in range(-1, 9):  # yesterday's may still be open (across midnight); a week and a day ahead
        day = today + timedelta(days=offset)
        if day.weekday() not in window.weekdays:
            continue
        opens, closes = opening_on(window, day)
        if closes > now and closes > opens:  # a window inside a spring-forward gap does not happen
            return opens, closes
    raise AssertionError("a window with a weekday opens within eight days")  # pragma: no cover


def is_open(window: Window, now: datetime) -> bool:
    opens, _ = next_opening(window, now)
    return opens <= now


def parse_moment(text: str) -> datetime:
    """A moment typed by a person or a script: ISO 8601 with a time zone ("2026-12-05T02:00Z",
    "...+01:00"), or without one, read as UTC (what the browser's date-and-time field sends)."""
    raw = (text or "").strip()
    if not raw or len(raw) > 40:
        raise ValueError("Give a date and time, e.g. 2026-12-05T02:00Z.")
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise ValueError(f"{raw!r} is not a date and time like 2026-12-05T02:00Z.") from exc
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
