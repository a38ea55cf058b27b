"""How often a CronWorkflow's schedule fires: the longest gap between two successive fire times (pure).

The doctor judges "the sweep has not been scheduled for too long" in multiples of this gap. The longest
gap, not the typical one, so that an irregular schedule (`0 9 * * 1-5`: a day, and three days over a
weekend) is never called late when it is not.

Supported: what the CronWorkflow CRD admits (argo-workflows v4.0.5 `CronWorkflowSpec.Schedules`, its
pattern), with the meaning the workflow-controller's cron library (robfig/cron v3, `ParseStandard`) gives it:

- five fields, minute (0-59) hour (0-23) day-of-month (1-31) month (1-12) day-of-week (0-6, Sunday 0),
  each a comma list of `*`, `?`, `N`, `A-B`, `*/S`, `N/S` (N to the field's end) or `A-B/S`;
  when day-of-month and day-of-week are both restricted (neither is `*`, `?` or `*/1`), a day matches
  either of them, otherwise both;
- `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`;
- `@every DURATION` (Go's durations: `90s`, `2m`, `1h30m`).

Not supported, and an error says so rather than guessing: names (`MON`, `JAN`), `L`, `W`, `#`, a sixth
(seconds) field, a `CRON_TZ=` prefix (the CRD takes the zone in `spec.timezone`), and a schedule that fires
on fewer than two days of the nine years searched (2024 to 2032: three 29 Februaries). Gaps are counted in wall-clock
minutes: a daylight-saving change of `spec.timezone` (an hour) is not counted; the doctor's margin covers it.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from itertools import pairwise

DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
               "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 6))
SEARCH_FROM, SEARCH_TO = date(2024, 1, 1), date(2033, 1, 1)
"""The days searched for fire times: nine years, three of them with a 29 February."""
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
SUPPORTED = ("five numeric fields (*, ?, N, A-B, */S, N/S, A-B/S, comma lists), @hourly/@daily/@weekly/"
             "@monthly/@yearly, or @every DURATION")


class ScheduleError(ValueError):
    """A schedule the doctor cannot interpret: the message says which part, and what is supported."""


def longest_gap_s(schedule: str) -> float:
    """Seconds of the longest gap between two successive fire times of one schedule."""
    text = " ".join(schedule.split())
    if text.startswith("@every"):
        return _every_s(text)
    text = DESCRIPTORS.get(text, text)
    fields = text.split(" ")
    if len(fields) != 5:
        raise ScheduleError(f"schedule {schedule!r}: expected {SUPPORTED}; found {len(fields)} field(s)")
    (minutes, _), (hours, _), (days, day_star), (months, _), (weekdays, weekday_star) = (
        _field(schedule, part, *spec) for part, spec in zip(fields, FIELDS, strict=True))
    offsets = sorted(h * 60 + m for h in hours for m in minutes)
    within = max((b - a for a, b in pairwise(offsets)), default=0)
    matching = []
    for index in range((SEARCH_TO - SEARCH_FROM).days):
        day = SEARCH_FROM + timedelta(days=index)
        if day.month not in months:
            continue
        by_date, by_weekday = day.day in days, day.isoweekday() % 7 in weekdays
        if (by_date and by_weekday) if (day_star or weekday_star) else (by_date or by_weekday):
            matching.append(index)
    if len(matching) < 2:
        raise ScheduleError(f"schedule {schedule!r} fires on {len(matching)} day(s) from {SEARCH_FROM.year} to "
                            f"{SEARCH_TO.year - 1}: no interval to judge it by")
    across = max(((b - a) * 1440 + offsets[0] - offsets[-1] for a, b in pairwise(matching)),
                 default=0)
    return 60.0 * max(within, across)


def interval_s(schedules: list[str] | tuple[str, ...]) -> float:
    """The interval to judge a CronWorkflow by: with several schedules, the shortest of their longest gaps (never
    shorter than the longest gap of all their fire times together, so never too strict)."""
    if not schedules:
        raise ScheduleError("the CronWorkflow has no schedule (spec.schedules is empty)")
    return min(longest_gap_s(s) for s in schedules)


def describe(seconds: float) -> str:
    """`2m`, `1h30m`, `3d`: a gap as a reader says it."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    return "".join(parts)


def _every_s(text: str) -> float:
    duration = text.removeprefix("@every").strip()
    if not duration or _DURATION.sub("", duration):
        raise ScheduleError(f"schedule {text!r}: expected @every and a duration such as 90s, 2m or 1h30m")
    seconds = sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION.findall(duration))
    return float(max(1, int(seconds)))  # robfig/cron's Every: whole seconds, at least one


def _field(schedule: str, text: str, name: str, low: int, high: int) -> tuple[set[int], bool]:
    """The values one field selects, and whether it is unrestricted (`*`, `?`, `*/1`: the day rule above)."""
    values: set[int] = set()
    star = False
    for part in text.split(","):
        found = re.fullmatch(r"(\*|\?|\d+)(?:-(\d+))?(?:/(\d+))?", part)
        if found is None:
            raise ScheduleError(f"schedule {schedule!r}: {name} {part!r} is not a number, range or step "
                                f"(names, L, W and # are not supported); expected {SUPPORTED}")
        start_text, end_text, step_text = found.groups()
        step = int(step_text) if step_text else 1
        if start_text in ("*", "?"):
            if end_text:
                raise ScheduleError(f"schedule {schedule!r}: {name} {part!r}: a range cannot start with {start_text}")
            start, end = low, high
            star = star or step == 1
        else:
            start = int(start_text)
            end = int(end_text) if end_text else (high if step_text else start)
        if not low <= start <= end <= high or step < 1:
            raise ScheduleError(f"schedule {schedule!r}: {name} {part!r}: expected values {low}-{high}, a range "
                                "from low to high, and a step of at least 1")
        values.update(range(start, end + 1, step))
    return values, star
