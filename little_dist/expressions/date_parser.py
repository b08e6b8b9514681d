"""V8's ``Date`` string parser (``src/date/dateparser*``), read as ``Date.parse`` reads a string.

One pass over a token stream: first the ES5 ISO form
(``[±YY]YYYY[-MM[-DD]][THH:mm[:ss[.s]][Z|±hh:mm]]``); whatever it leaves goes to the legacy
heuristics, which keep the fields the ISO pass already read:

* words before the first number are skipped; parenthesised text is skipped; after a number a word
  must be a month name (any word starting with its three letters), ``AM``/``PM`` after a time,
  ``UT``/``UTC``/``GMT``/``Z`` or a US zone (``EST`` ... ``PDT``) — any other word is invalid;
* ``n:`` starts a time (``n::`` is hour and zero minutes), ``.`` before seconds' fraction;
* a sign after a time or after a UTC name is an offset (``+h``, ``+hh``, ``+hhmm``, ``+hh:mm``);
* every other number is a day field. :func:`_compose_day` decides which is the year: ``M/D/Y``
  unless the first number cannot be a day (then ``Y/M/D``); with a month name, the first number
  is the day if it can be one, else the year. A year 0-49 is 20xx and 50-99 is 19xx, except in
  the ISO form. Missing month or day is 1, missing year is 0 (so 2000).

The result is the fields V8 hands to ``MakeDate``; ``offset`` is ``None`` for local time.
Numbers keep at most nine significant digits, as V8's ``ReadUnsignedNumeral`` does, and a NUL
ends the input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, NamedTuple

__all__ = ["DateFields", "parse_date"]

_MONTH: Final = "month"
_AM_PM: Final = "am_pm"
_ZONE: Final = "zone"
_TIME_SEPARATOR: Final = "t"
_UNKNOWN_WORD: Final = "word"
# V8's KeywordTable: a word matches on its first three letters (lower-cased); only month names
# may be longer than their entry.
_KEYWORDS: Final[tuple[tuple[str, str, int], ...]] = (
    *(
        (name, _MONTH, index + 1)
        for index, name in enumerate(
            ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
        )
    ),
    ("am", _AM_PM, 0),
    ("pm", _AM_PM, 12),
    ("ut", _ZONE, 0),
    ("utc", _ZONE, 0),
    ("z", _ZONE, 0),
    ("gmt", _ZONE, 0),
    ("cdt", _ZONE, -5),
    ("cst", _ZONE, -6),
    ("edt", _ZONE, -4),
    ("est", _ZONE, -5),
    ("mdt", _ZONE, -6),
    ("mst", _ZONE, -7),
    ("pdt", _ZONE, -7),
    ("pst", _ZONE, -8),
    ("t", _TIME_SEPARATOR, 0),
)
_SYMBOLS: Final = ":-+.)"
# ECMAScript WhiteSpace, with \n and \r; U+2028 and U+2029 are read as letters, as in V8.
_WHITE_SPACE: Final = frozenset(
    "\t\n\v\f\r \u00a0\u1680\u202f\u205f\u3000\ufeff"
    + "".join(chr(code) for code in range(0x2000, 0x200B))
)
_MAX_SIGNIFICANT_DIGITS: Final = 9


class DateFields(NamedTuple):
    """What V8 passes to ``MakeDay`` / ``MakeTime``; ``month`` is 1-12, ``offset`` in seconds."""

    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    millisecond: int
    offset: int | None


class _Token(NamedTuple):
    kind: str  # "number", "symbol", "word", "space", "unknown", "end", "invalid"
    value: int | str = 0
    length: int = 0
    word: str = ""  # the keyword type of a word

    def number(self, length: int | None = None) -> bool:
        return self.kind == "number" and (length is None or self.length == length)

    def symbol(self, char: str) -> bool:
        return self.kind == "symbol" and self.value == char

    def sign(self) -> int:
        """1 or -1 for ``+`` / ``-``, else 0."""
        if self.kind != "symbol" or self.value not in ("+", "-"):
            return 0
        return 1 if self.value == "+" else -1

    def zulu(self) -> bool:
        return self.kind == "word" and self.word == _ZONE and self.length == 1

    def int_value(self) -> int:
        assert isinstance(self.value, int)
        return self.value


_END: Final = _Token("end")
_INVALID: Final = _Token("invalid")


def _lookup(prefix: str, length: int) -> tuple[str, int]:
    for name, kind, value in _KEYWORDS:
        if prefix == name and (length <= 3 or kind == _MONTH):
            return kind, value
    return _UNKNOWN_WORD, 0


class _Tokenizer:
    """V8's DateStringTokenizer: one token of look-ahead (``peek``)."""

    def __init__(self, text: str) -> None:
        nul = text.find("\0")
        self._text = text if nul < 0 else text[:nul]
        self._pos = 0
        self.peek = self._scan()

    def next(self) -> _Token:
        token, self.peek = self.peek, self._scan()
        return token

    def skip_symbol(self, char: str) -> bool:
        if self.peek.symbol(char):
            self.next()
            return True
        return False

    def _scan(self) -> _Token:
        text, start = self._text, self._pos
        if start >= len(text):
            return _END
        char = text[start]
        if "0" <= char <= "9":
            end = start
            while end < len(text) and "0" <= text[end] <= "9":
                end += 1
            self._pos = end
            digits = text[start:end].lstrip("0")[:_MAX_SIGNIFICANT_DIGITS]
            return _Token("number", int(digits or "0"), end - start)
        self._pos = start + 1
        if char in _SYMBOLS:
            return _Token("symbol", char, 1)
        if char >= "A" and char not in _WHITE_SPACE:
            end = start
            while end < len(text) and text[end] >= "A" and text[end] not in _WHITE_SPACE:
                end += 1
            self._pos = end
            # AsciiAlphaToLower is ``| 0x20``, applied to every character of the prefix.
            prefix = "".join(chr(ord(c) | 0x20) for c in text[start : min(end, start + 3)])
            kind, value = _lookup(prefix, end - start)
            return _Token("word", value, end - start, kind)
        if char in _WHITE_SPACE:
            return _Token("space", 0, 1)
        if char == "(":
            depth, end = 0, start
            while True:
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                end += 1
                if depth <= 0 or end >= len(text):
                    break
            self._pos = end
        return _Token("unknown")


def _between(value: int, low: int, high: int) -> bool:
    return low <= value <= high


@dataclass
class _Day:
    fields: list[int] = field(default_factory=list)
    named_month: int | None = None
    iso: bool = False

    def add(self, value: int) -> bool:
        if len(self.fields) >= 3:
            return False
        self.fields.append(value)
        return True


@dataclass
class _Time:
    fields: list[int] = field(default_factory=list)
    hour_offset: int | None = None

    def add(self, value: int) -> bool:
        if len(self.fields) >= 4:
            return False
        self.fields.append(value)
        return True

    def add_final(self, value: int) -> bool:
        if not self.add(value):
            return False
        self.fields.extend([0] * (4 - len(self.fields)))
        return True

    def expecting(self, value: int) -> bool:
        index = len(self.fields)
        return (
            (index == 1 and _between(value, 0, 59))
            or (index == 2 and _between(value, 0, 59))
            or (index == 3 and _between(value, 0, 999))
        )


@dataclass
class _Zone:
    sign: int | None = None
    hour: int | None = None
    minute: int | None = None

    def set_hours(self, hours: int) -> None:
        self.sign = -1 if hours < 0 else 1
        self.hour, self.minute = abs(hours), 0

    def expecting(self, value: int) -> bool:
        return self.hour is not None and self.minute is None and _between(value, 0, 59)

    def is_utc(self) -> bool:
        return self.hour == 0 and self.minute == 0


def _milliseconds(token: _Token) -> int:
    """The first three digits of a fraction, as V8 infers them from value and length."""
    number, length = token.int_value(), min(token.length, _MAX_SIGNIFICANT_DIGITS)
    if length < 3:
        return number * (100 if length == 1 else 10)
    divisor: int = 10 ** (length - 3)
    return number // divisor


def _two_digits(scanner: _Tokenizer, low: int, high: int) -> int | None:
    if not scanner.peek.number(2) or not _between(scanner.peek.int_value(), low, high):
        return None
    return scanner.next().int_value()


def _es5(scanner: _Tokenizer, day: _Day, time: _Time, zone: _Zone) -> _Token:
    """V8's ParseES5DateTime: the ISO form, or the first token it could not take."""
    sign = scanner.peek.sign()
    if sign:
        sign_token = scanner.next()
        if not scanner.peek.number(6):
            return sign_token
        year = scanner.next().int_value()
        if sign < 0 and year == 0:
            return sign_token
        day.add(sign * year)
    elif scanner.peek.number(4):
        day.add(scanner.next().int_value())
    else:
        return scanner.next()
    if scanner.skip_symbol("-"):
        if not scanner.peek.number(2) or not _between(scanner.peek.int_value(), 1, 12):
            return scanner.next()
        day.add(scanner.next().int_value())
        if scanner.skip_symbol("-"):
            if not scanner.peek.number(2) or not _between(scanner.peek.int_value(), 1, 31):
                return scanner.next()
            day.add(scanner.next().int_value())
    if not (scanner.peek.kind == "word" and scanner.peek.word == _TIME_SEPARATOR):
        if scanner.peek.kind != "end":
            return scanner.next()
    else:
        scanner.next()
        hour = _two_digits(scanner, 0, 24)
        if hour is None:
            return _INVALID
        time.add(hour)
        top = 0 if hour == 24 else 59
        minute = _two_digits(scanner, 0, top) if scanner.skip_symbol(":") else None
        if minute is None:
            return _INVALID
        time.add(minute)
        if scanner.skip_symbol(":"):
            second = _two_digits(scanner, 0, top)
            if second is None:
                return _INVALID
            time.add(second)
            if scanner.skip_symbol("."):
                if not scanner.peek.number() or (hour == 24 and scanner.peek.int_value() > 0):
                    return _INVALID
                time.add(_milliseconds(scanner.next()))
        if scanner.peek.zulu():
            scanner.next()
            zone.set_hours(0)
        elif scanner.peek.sign():
            zone.sign = scanner.next().sign()
            if scanner.peek.number(4):
                hour, minute = divmod(scanner.next().int_value(), 100)
                if not (_between(hour, 0, 23) and _between(minute, 0, 59)):
                    return _INVALID
                zone.hour, zone.minute = hour, minute
            else:
                zone.hour = _two_digits(scanner, 0, 23)
                if zone.hour is None or not scanner.skip_symbol(":"):
                    return _INVALID
                zone.minute = _two_digits(scanner, 0, 59)
                if zone.minute is None:
                    return _INVALID
        if scanner.peek.kind != "end":
            return _INVALID
    # Date-only ISO forms are UTC; date-time forms without an offset are local time.
    if zone.hour is None and not time.fields:
        zone.set_hours(0)
    day.iso = True
    return _END


def _legacy_number(scanner: _Tokenizer, token: _Token, day: _Day, time: _Time, zone: _Zone) -> bool:
    number = token.int_value()
    if scanner.skip_symbol(":"):
        if scanner.skip_symbol(":"):
            if time.fields:
                return False
            time.add(number)
            time.add(0)
            return True
        if not time.add(number):
            return False
        if scanner.peek.symbol("."):
            scanner.next()
        return True
    if scanner.skip_symbol(".") and time.expecting(number):
        time.add(number)
        if not scanner.peek.number():
            return False
        # V8 ignores a full clock here ("1:2:3:4.5" keeps 4 ms).
        time.add_final(_milliseconds(scanner.next()))
        return True
    if zone.expecting(number):
        zone.minute = number
        return True
    if time.expecting(number):
        time.add_final(number)
        # A time must end at the end, a space, "Z" or a sign.
        peek = scanner.peek
        return peek.kind in ("end", "space") or peek.zulu() or bool(peek.sign())
    if not day.add(number):
        return False
    scanner.skip_symbol("-")
    return True


def _legacy_offset(scanner: _Tokenizer, sign: int, zone: _Zone) -> bool:
    zone.sign = sign
    number, length = 0, 0
    if scanner.peek.number():
        token = scanner.next()
        number, length = token.int_value(), token.length
    if scanner.peek.symbol(":"):
        # V8 reads "+hh:mm" as hours, then the minutes as a bare number.
        zone.hour, zone.minute = number, None
    elif length in (1, 2):
        zone.hour, zone.minute = number, 0
    elif length in (3, 4):
        zone.hour, zone.minute = divmod(number, 100)
    else:
        return False
    return True


def _legacy(scanner: _Tokenizer, first: _Token, day: _Day, time: _Time, zone: _Zone) -> bool:
    """V8's legacy loop over what the ISO pass left: False as soon as the string is invalid."""
    read_number = bool(day.fields)
    token = first
    while token.kind != "end":
        if token.kind == "number":
            read_number = True
            if not _legacy_number(scanner, token, day, time, zone):
                return False
        elif token.kind == "word":
            if token.word == _AM_PM and time.fields:
                time.hour_offset = token.int_value()
            elif token.word == _MONTH:
                day.named_month = token.int_value()
                scanner.skip_symbol("-")
            elif token.word == _ZONE and read_number:
                zone.set_hours(token.int_value())
            elif read_number or scanner.peek.number():
                # A stray word after a number, or glued to the first number, is invalid.
                return False
        elif token.sign() and (zone.is_utc() or time.fields):
            if not _legacy_offset(scanner, token.sign(), zone):
                return False
            read_number = True
        elif (token.sign() or token.symbol(")")) and read_number:
            return False
        token = scanner.next()
    return True


def _compose_day(day: _Day) -> tuple[int, int, int] | None:
    if not day.fields:
        return None
    first, second, third = (*day.fields, 1, 1)[:3]
    if day.named_month is None:
        if day.iso or not _between(first, 1, 31):
            year, month, date = first, second, third
        else:
            month, date, year = first, second, third
    else:
        month = day.named_month
        if not _between(first, 1, 31):
            year, date = first, second
        else:
            date, year = first, second
    if not day.iso and _between(year, 0, 99):
        year += 2000 if year < 50 else 1900
    if not (_between(month, 1, 12) and _between(date, 1, 31)):
        return None
    return year, month, date


def _compose_time(time: _Time) -> tuple[int, int, int, int] | None:
    hour, minute, second, milli = (*time.fields, 0, 0, 0, 0)[:4]
    if time.hour_offset is not None:
        if not _between(hour, 0, 12):
            return None
        hour = hour % 12 + time.hour_offset
    if not (
        _between(hour, 0, 23)
        and _between(minute, 0, 59)
        and _between(second, 0, 59)
        and _between(milli, 0, 999)
    ) and (hour, minute, second, milli) != (24, 0, 0, 0):
        return None
    return hour, minute, second, milli


def _compose_offset(zone: _Zone) -> int | None:
    if zone.sign is None:
        return None
    return zone.sign * ((zone.hour or 0) * 3600 + (zone.minute or 0) * 60)


def parse_date(text: str) -> DateFields | None:
    """The fields of ``Date.parse(text)``, or None where V8 gives an Invalid Date."""
    scanner = _Tokenizer(text)
    day, time, zone = _Day(), _Time(), _Zone()
    rest = _es5(scanner, day, time, zone)
    if rest.kind == "invalid" or not _legacy(scanner, rest, day, time, zone):
        return None
    date, clock = _compose_day(day), _compose_time(time)
    if date is None or clock is None:
        return None
    return DateFields(*date, *clock, _compose_offset(zone))
