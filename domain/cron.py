"""The cron expressions a workflow schedule accepts, checked without running anything."""

from __future__ import annotations

import re
import zoneinfo
from datetime import UTC, datetime, tzinfo
from functools import lru_cache

from croniter import croniter


def _field(value: str, step: str) -> str:
    """A cron field: `*` or a value or a range, each with an optional step, comma-separated."""
    item = rf"(\*|{value}(-{value})?)(/{step})?"
    return rf"{item}(,{item})*"


_MINUTE = _field(r"[0-5]?[0-9]", r"([1-9]|[1-5][0-9])")
# The expressions we accept, as a pattern the API's document states: minute, hour, day of
# month, month and day of week (0 and 7 are Sunday), then optionally seconds; numbers only,
# within each field's range, steps within it too (croniter accepts every one of them).
CRON_PATTERN = (
    rf"^{_MINUTE} +{_field(r'(1?[0-9]|2[0-3])', r'([1-9]|1[0-9]|2[0-3])')}"
    rf" +{_field(r'(0?[1-9]|[12][0-9]|3[01])', r'([1-9]|[12][0-9]|30)')}"
    rf" +{_field(r'(0?[1-9]|1[0-2])', r'([1-9]|1[01])')}"
    rf" +{_field(r'[0-7]', r'[1-6]')}( +{_MINUTE})?$"
)
_CRON = re.compile(CRON_PATTERN)


def cron_problem(expression: str) -> str | None:
    """Why `expression` is not a cron expression we accept, or None. Five fields (minute
    precision) or six (the sixth is seconds), evaluated in UTC: numbers, ranges, lists and
    steps within each field's range, and `*` (`CRON_PATTERN`)."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        return f"cron {expression!r} must have 5 fields (or 6, the last being seconds)"
    if not _CRON.match(expression) or not croniter.is_valid(expression):
        return (
            f"cron {expression!r} is not a valid cron expression: each field is `*`, a "
            "number, a range or a list of them, with an optional `/step`, within its range"
        )
    return None


@lru_cache(maxsize=256)
def _zone(name: str) -> tzinfo | None:
    if name in ("UTC", "Etc/UTC"):
        return UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def timezone_problem(name: str) -> str | None:
    """Why `name` is not a time zone a schedule may tick in (an IANA name), or None."""
    if len(name) > 64 or _zone(name) is None:
        return f"timezone {name[:80]!r} is not an IANA time zone name (such as Europe/Paris)"
    return None


def ticks_after(expression: str, after: datetime, timezone: str = "UTC") -> croniter:
    """The ticks of `expression` after `after`, read on the clocks of `timezone` (a day's
    ticks follow its daylight saving time); each `get_next(datetime)` is time-zone aware."""
    zone = _zone(timezone) or UTC
    return croniter(expression, after.astimezone(zone))


def next_tick(expression: str, after: datetime, timezone: str = "UTC") -> datetime:
    """The first tick after `after`, in UTC."""
    tick: datetime = ticks_after(expression, after, timezone).get_next(datetime)
    return tick.astimezone(UTC)


# Ticks looked at for the shortest interval: more than a minute's worth of seconds, so a
# seconds field is seen over a whole minute in which it fires.
_SAMPLED_TICKS = 128
_SAMPLE_FROM = datetime(2026, 1, 1, tzinfo=UTC)


def shortest_interval(expression: str) -> float:
    """The shortest time in seconds between two ticks of `expression` (an accepted one)."""
    ticks = croniter(expression, _SAMPLE_FROM)
    previous: datetime = ticks.get_next(datetime)
    shortest = float("inf")
    for _ in range(_SAMPLED_TICKS):
        tick: datetime = ticks.get_next(datetime)
        shortest = min(shortest, (tick - previous).total_seconds())
        previous = tick
    return shortest


def interval_problem(expression: str, min_interval: float) -> str | None:
    """Why `expression` (an accepted one) fires more often than once every `min_interval`
    seconds, or None."""
    interval = shortest_interval(expression)
    if interval < min_interval:
        return (
            f"schedule_too_frequent: cron {expression!r} fires every {interval:g} s; a "
            f"schedule may fire at most once every {min_interval:g} s"
        )
    return None
