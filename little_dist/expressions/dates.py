"""``date()``: ``new Date(String(v)).toISOString()``, on a machine whose time zone is UTC.

The string is read as V8's ``Date`` parser reads it (:mod:`.date_parser`): the ISO forms and the
legacy ones (``"10"``, ``"2024/1/5"``, ``"March 7 2024"``, RFC 2822 ``"Tue, 05 Mar 2024 10:30:00
GMT"``, ``"2024-03-05 10:30"``). A date-time without an offset is local time in JavaScript; here
local time is UTC, as on a server whose ``TZ`` is UTC, so the result does not depend on the
machine. Times outside +-8.64e15 ms are invalid, as ``TimeClip`` makes them.

Invalid input yields ``None``; the caller raises upstream's ``RangeError: Invalid time value``.
"""

from __future__ import annotations

from typing import Final

from little_dist.expressions.date_parser import parse_date

__all__ = ["iso_date_string"]

_MS_PER_DAY: Final = 86_400_000
_MAX_TIME: Final = 8.64e15


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (month 1-12, any day count)."""
    shifted = year - (month <= 2)
    era = shifted // 400
    year_of_era = shifted - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468 + (day - 1)


def _civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719_468
    era = days // 146_097
    day_of_era = days - era * 146_097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_index = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * month_index + 2) // 5 + 1
    month = month_index + 3 if month_index < 10 else month_index - 9
    return year_of_era + era * 400 + (month <= 2), month, day


def _time_value(text: str) -> int | None:
    """Milliseconds since the epoch, or None when V8 would give an Invalid Date."""
    fields = parse_date(text)
    if fields is None:
        return None
    millis = ((fields.hour * 60 + fields.minute) * 60 + fields.second) * 1000 + fields.millisecond
    value = _days_from_civil(fields.year, fields.month, fields.day) * _MS_PER_DAY + millis
    # Local time is UTC here, so a missing offset is zero.
    value -= (fields.offset or 0) * 1000
    if abs(value) > _MAX_TIME:
        return None
    return value


def iso_date_string(text: str) -> str | None:
    """``new Date(text).toISOString()``, or None for an invalid date."""
    value = _time_value(text)
    if value is None:
        return None
    days, millis = divmod(value, _MS_PER_DAY)
    year, month, day = _civil_from_days(days)
    seconds, milli = divmod(millis, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    # toISOString writes years outside 0..9999 with a sign and six digits.
    sign = "" if 0 <= year <= 9999 else ("-" if year < 0 else "+")
    year_text = f"{sign}{abs(year):0{6 if sign else 4}d}"
    return f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{milli:03d}Z"
