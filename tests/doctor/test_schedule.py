"""The longest gap between fire times of a CronWorkflow schedule (gpuaas.doctor.schedule), against answers
worked out by hand from the schedule's fire times, and the schedules it refuses to guess about."""

from __future__ import annotations

import pytest

from gpuaas.doctor.schedule import ScheduleError, describe, interval_s, longest_gap_s

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


@pytest.mark.parametrize(("schedule", "seconds", "why"), [
    ("*/2 * * * *", 2 * MINUTE, "the rendered sweep: :00, :02 ... :58, then :00"),
    ("* * * * *", MINUTE, "the stack's sweep"),
    ("*/7 * * * *", 7 * MINUTE, ":00 ... :56 are 7 apart; :56 to the next :00 is 4"),
    ("5,50 * * * *", 45 * MINUTE, ":05 to :50 is 45, :50 to :05 is 15"),
    ("10-20/5 * * * *", 50 * MINUTE, ":10 :15 :20, then :20 to the next :10"),
    ("30/10 * * * *", 40 * MINUTE, "N/S runs N to the field's end: :30 :40 :50, then :50 to :30"),
    ("0 */6 * * *", 6 * HOUR, "00:00 06:00 12:00 18:00"),
    ("0 9-17 * * *", 16 * HOUR, "09:00 ... 17:00 hourly, then 17:00 to 09:00"),
    ("0 9 * * 1-5", 3 * DAY, "weekdays at 09:00: Friday to Monday"),
    ("0 0 * * 0", 7 * DAY, "Sundays"),
    ("0 0 1,15 * 1", 7 * DAY, "both day fields restricted: the 1st, the 15th OR a Monday; never more than a week"),
    ("0 0 */1 * 1", 7 * DAY, "*/1 counts as unrestricted: every day AND Monday, so Mondays"),
    ("0 0 1 * *", 31 * DAY, "monthly: the longest month"),
    ("0 0 29 2 *", 1461 * DAY, "29 February: four years apart"),
    ("@hourly", HOUR, ""),
    ("@daily", DAY, ""),
    ("@midnight", DAY, ""),
    ("@weekly", 7 * DAY, ""),
    ("@monthly", 31 * DAY, ""),
    ("@yearly", 366 * DAY, "2024 (a leap year) to 2025"),
    ("@every 90s", 90.0, ""),
    ("@every 1h30m", 5400.0, ""),
    ("@every 2.5m", 150.0, "Go durations take fractions"),
    ("@every 500ms", 1.0, "robfig/cron runs @every at most once a second"),
    ("  */2   *  * * *  ", 2 * MINUTE, "spaces"),
])
def test_the_longest_gap_between_fire_times(schedule: str, seconds: float, why: str) -> None:
    assert longest_gap_s(schedule) == seconds, why


@pytest.mark.parametrize(("schedule", "words"), [
    ("0 0 L * *", "not a number, range or step"),
    ("0 0 * * MON", "not a number, range or step"),
    ("0 0 * * 7", "expected values 0-6"),
    ("61 * * * *", "expected values 0-59"),
    ("0 0 0 * *", "expected values 1-31"),
    ("5-1 * * * *", "a range from low to high"),
    ("*/0 * * * *", "a step of at least 1"),
    ("*-5 * * * *", "cannot start with *"),
    ("0 0 * * * *", "found 6 field(s)"),
    ("CRON_TZ=UTC */2 * * * *", "found 6 field(s)"),
    ("@every", "a duration"),
    ("@every 2 minutes", "a duration"),
    ("@reboot", "found 1 field(s)"),
    ("0 0 31 2 *", "fires on 0 day(s)"),
    ("0 0 30 2 *", "fires on 0 day(s)"),
])
def test_what_it_does_not_interpret_is_an_error_that_says_what(schedule: str, words: str) -> None:
    with pytest.raises(ScheduleError, match="schedule") as raised:
        longest_gap_s(schedule)
    assert words in str(raised.value)


def test_several_schedules_are_judged_by_the_shortest_longest_gap() -> None:
    assert interval_s(["0 * * * *", "*/10 * * * *"]) == 10 * MINUTE
    with pytest.raises(ScheduleError, match="no schedule"):
        interval_s([])


def test_gaps_read_as_people_say_them() -> None:
    assert [describe(s) for s in (40, 120, 5400, 3 * DAY, 90061)] == ["40s", "2m", "1h30m", "3d", "1d1h1m1s"]
