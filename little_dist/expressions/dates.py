"""``date()``: ``new Date(String(v)).toISOString()`` for the ISO forms V8 accepts.

Supported, as V8's ES5 date-time parser reads them:

* ``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD`` and the expanded years ``+YYYYYY`` / ``-YYYYYY``
  (``-000000`` is invalid); date-only forms are UTC;
* ``T`` (or ``t``) then ``HH:mm``, ``HH:mm:ss`` or ``HH:mm:ss.fff...`` (any number of fraction
  digits, truncated to milliseconds), ``24:00`` allowed only with zero minutes/seconds/fraction;
* an optional offset ``Z``/``z``, ``+HH:mm`` or ``+HHmm``;
* days past the end of a month roll over (``2024-02-31`` is March 2), as in V8.

Deviations, deliberate because they depend on the machine or on V8's legacy heuristics:

* a date-time **without** an offset is local time in JavaScript; here it is read as UTC;
* a single space instead of ``T`` is accepted like ``T`` (V8 reaches the same fields through
  its legacy parser);
* every other form V8's legacy parser guesses at (``Jan 2 2024``, ``2024/01/02``, ``"5"``) is
  treated as invalid.

Invalid input yields ``None``; the caller raises upstream's ``RangeError: Invalid time value``.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["iso_date_string"]

_ISO: Final = re.compile(
    r"(?:(?P<sign>[+-])(?P<year6>[0-9]{6})|(?P<year4>[0-9]{4}))"
    r"(?:-(?P<month>[0-9]{2})(?:-(?P<day>[0-9]{2}))?)?"
    r"(?:[Tt ](?P<hour>[0-9]{2}):(?P<minute>[0-9]{2})"
    r"(?::(?P<second>[0-9]{2})(?:\.(?P<fraction>[0-9]+))?)?"
    r"(?P<zone>[Zz]|[+-][0-9]{2}:[0-9]{2}|[+-][0-9]{4})?)?",
    re.ASCII,
)
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
    match = _ISO.fullmatch(text)
    if match is None:
        return None
    fields = match.groupdict()
    if fields["year6"] is not None:
        year = int(fields["year6"])
        if fields["sign"] == "-":
            if year == 0:
                return None
            year = -year
    else:
        year = int(fields["year4"])
    month = int(fields["month"] or 1)
    day = int(fields["day"] or 1)
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    millis = 0
    if fields["hour"] is not None:
        hour, minute = int(fields["hour"]), int(fields["minute"])
        second = int(fields["second"] or 0)
        fraction = fields["fraction"] or ""
        milli = int((fraction[:3]).ljust(3, "0")) if fraction else 0
        if hour > 24 or minute > 59 or second > 59:
            return None
        if hour == 24 and (minute or second or (fraction and int(fraction[:9]))):
            return None
        millis = ((hour * 60 + minute) * 60 + second) * 1000 + milli
        zone = fields["zone"]
        if zone and zone not in "Zz":
            digits = zone[1:].replace(":", "")
            zone_hour, zone_minute = int(digits[:2]), int(digits[2:])
            if zone_hour > 23 or zone_minute > 59:
                return None
            offset = (zone_hour * 60 + zone_minute) * 60_000
            millis -= offset if zone[0] == "+" else -offset
    value = _days_from_civil(year, month, day) * _MS_PER_DAY + millis
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
