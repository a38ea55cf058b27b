"""Go's `time` package as a Sensor's time filter uses it: clock parsing, time zones, and wall
clocks turned into instants, to the nanosecond.

A time filter `{start, stop, timezone}` is evaluated (argo-events v1.9.11 `filter.go` filterTime,
`pkg/shared/util/time.go`) by parsing "<event's date> <start>" with Go's layout
"2006-01-02 15:04:05", in UTC or, since v1.9.9, in `timezone` (`time.LoadLocation`, on the
event's date in that zone). Go and Python disagree on every piece of that, so each is done the
Go way here:

* the clock: one or two hour digits, exactly two minute and second digits, an optional fraction
  after `.` or `,` (any number of digits, nanoseconds kept), spaces before it skipped, nothing
  after it; 24:00:00 and 60 seconds are out of range (Python's strptime takes `9:0:0` and `:60`);
* the zone: `LoadLocation` reads the TZif file of that name from Go's zoneinfo folders (so
  `Etc//UTC` works, `..` never does, "" and "UTC" are UTC, "Local" is the pod's zone: UTC in the
  sensor image, which has no /etc/localtime);
* a wall clock that a DST change skips or repeats gets Go's offset (`time.Date`), not Python's
  `fold` rule: 02:30 on Berlin's autumn change is the second 02:30 in Go, the first in Python.

The sensor image copies Alpine's /usr/share/zoneinfo; this module reads the local machine's, so a
zone whose rules changed after the image was built may differ (the zone name never does).
"""

from __future__ import annotations

import functools
import io
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

CLOCK_LAYOUT = "2006-01-02 15:04:05"
_ZONE_FOLDERS = ("/usr/share/zoneinfo/", "/usr/share/lib/zoneinfo/", "/usr/lib/locale/TZ/", "/etc/zoneinfo/")
_NANOS = 1_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class GoTimeError(ValueError):
    """What Go's time.Parse or time.LoadLocation would return as an error (same wording)."""


@dataclass(frozen=True)
class Clock:
    """A parsed "15:04:05[.fraction]"."""

    hour: int
    minute: int
    second: int
    nanosecond: int


def go_quote(text: str) -> str:
    """time's own quote(): double quotes, backslash escapes for quotes and backslashes."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            for byte in char.encode("utf-8"):
                out.append(f"\\x{byte:02x}")
    out.append('"')
    return "".join(out)


def parse_clock(date: str, text: str) -> Clock:
    """Parse `text` the way time.Parse(CLOCK_LAYOUT, date + " " + text) reads its clock part.

    `date` (YYYY-MM-DD, as Go formats it) only appears in error messages, which then read
    exactly like the sensor's log line."""
    whole = f"{date} {text}"

    def cannot(value: str, element: str) -> GoTimeError:
        return GoTimeError(f"parsing time {go_quote(whole)} as {go_quote(CLOCK_LAYOUT)}: "
                           f"cannot parse {go_quote(value)} as {go_quote(element)}")

    def out_of_range(what: str) -> GoTimeError:
        return GoTimeError(f"parsing time {go_quote(whole)}: {what} out of range")

    # The layout's space matches any run of spaces (time.skip); the date part always matches.
    value = text.lstrip(" ")
    hour, rest = _number(value, fixed=False)
    if hour is None:
        raise cannot(value, "15")
    if hour >= 24:
        raise out_of_range("hour")
    value = rest
    if not value.startswith(":"):
        raise cannot(value, ":")
    value = value[1:]
    minute, rest = _number(value, fixed=True)
    if minute is None:
        raise cannot(value, "04")
    if minute >= 60:
        raise out_of_range("minute")
    value = rest
    if not value.startswith(":"):
        raise cannot(value, ":")
    value = value[1:]
    second, rest = _number(value, fixed=True)
    if second is None:
        raise cannot(value, "05")
    if second >= 60:
        raise out_of_range("second")
    value = rest
    nanosecond = 0
    if len(value) >= 2 and value[0] in ".," and _ascii_digit(value[1]):
        n = 2
        while n < len(value) and _ascii_digit(value[n]):
            n += 1
        digits = value[1:min(n, 10)]
        nanosecond = int(digits) * 10 ** (9 - len(digits))
        value = value[n:]
    if value:
        raise GoTimeError(f"parsing time {go_quote(whole)}: extra text: {go_quote(value)}")
    return Clock(hour, minute, second, nanosecond)


def _ascii_digit(char: str) -> bool:
    return "0" <= char <= "9"


def _number(value: str, fixed: bool) -> tuple[int | None, str]:
    """time.getnum: one or two ASCII digits (exactly two when fixed)."""
    if not value or not _ascii_digit(value[0]):
        return None, value
    if len(value) < 2 or not _ascii_digit(value[1]):
        if fixed:
            return None, value
        return int(value[0]), value[1:]
    return int(value[:2]), value[2:]


def load_location(name: str) -> tzinfo:
    """time.LoadLocation(name) as the sensor pod runs it; raises GoTimeError("unknown time zone ...")."""
    if name in ("", "UTC", "Local"):  # Local: the sensor image has no /etc/localtime, so UTC
        return UTC
    return _load_zone_file(name)


@functools.lru_cache(maxsize=512)
def _load_zone_file(name: str) -> tzinfo:
    if ".." in name or name[0] in "/\\":
        raise GoTimeError("time: invalid location name")
    folders = [f for f in _ZONE_FOLDERS if os.path.isdir(f)]
    if not folders:  # no system time zone database (not Linux): Python's own, if installed
        try:
            return ZoneInfo(name)
        except (ValueError, OSError) as exc:
            raise GoTimeError(f"unknown time zone {name}") from exc
    first_error: str | None = None
    for folder in folders:  # zoneinfo_read.go loadLocation: the first error that is not "no such file" wins
        try:
            with open(folder + "/" + name, "rb") as handle:
                data = handle.read(10 << 20)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            first_error = first_error or _errno_text(exc)
            continue
        try:
            return ZoneInfo.from_file(io.BytesIO(data), key=name)
        except (ValueError, OSError):
            first_error = first_error or "malformed time zone information"
    raise GoTimeError(first_error or f"unknown time zone {name}")


def _errno_text(exc: Exception) -> str:
    """The text of a syscall error as Go prints it (lower case, no file name)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[0].lower() + exc.strerror[1:]
    return "invalid argument"


def unix_nanos(moment: datetime, extra_nanos: int = 0) -> int:
    """Nanoseconds since the Unix epoch of an aware datetime (plus sub-microsecond nanoseconds)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * _NANOS + delta.microseconds * 1_000 + extra_nanos


def _offset_seconds(zone: tzinfo, unix_seconds: int) -> int:
    """The zone's UTC offset at an instant (Go's Location.lookup)."""
    if zone is UTC:
        return 0
    at = datetime.fromtimestamp(unix_seconds, tz=UTC).astimezone(zone)
    offset = at.utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def local_date(unix_nanos_value: int, zone: tzinfo) -> str:
    """The date ("2006-01-02") of an instant in a zone: baseDate.In(loc).Format("2006-01-02")."""
    seconds = unix_nanos_value // _NANOS
    offset = _offset_seconds(zone, seconds)
    day = _EPOCH + timedelta(seconds=seconds + offset)
    return f"{day.year:04d}-{day.month:02d}-{day.day:02d}"


def wall_clock_nanos(date: str, clock: Clock, zone: tzinfo) -> int:
    """time.Date(date, clock, zone) as Unix nanoseconds, with Go's rule for skipped and repeated
    wall clocks: take the offset in force at (wall clock read as UTC), then the offset in force at
    the instant that gives."""
    year, month, day = (int(part) for part in date.split("-"))
    as_utc = datetime(year, month, day, tzinfo=UTC) + timedelta(hours=clock.hour, minutes=clock.minute,
                                                                 seconds=clock.second)
    seconds = int((as_utc - _EPOCH).total_seconds())
    first = _offset_seconds(zone, seconds)
    if first != 0:
        seconds -= _offset_seconds(zone, seconds - first)
    return seconds * _NANOS + clock.nanosecond


def local_clock(unix_nanos_value: int, zone: tzinfo) -> str:
    """The wall clock ("15:04:05") of an instant in a zone, for explanations."""
    seconds = unix_nanos_value // _NANOS
    at = _EPOCH + timedelta(seconds=seconds + _offset_seconds(zone, seconds))
    return f"{at.hour:02d}:{at.minute:02d}:{at.second:02d}"
