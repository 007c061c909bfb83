"""An independent model of classic cron, for the tests of the built-in `next_occurrence`.

It reads an expression as crontab(5) describes it and knows nothing of croniter: each
field is a list of `*`, values, ranges `a-b` and steps (`*/n`, `a-b/n`, and `a/n` running to
the field's end), each item meaning the same wherever it stands (`9-9` is 9, `0,*` is every
value); months and days of the week also take their three-letter names; day-of-week 7 is
Sunday; the `@` macros stand for their five fields. A day fires when its
month matches and, if the day-of-month or day-of-week field begins with `*`, both day fields
match, otherwise either. Unlike the built-in, which walks matching wall times and maps each
to its instants, the model walks instants minute by minute and reads each as a wall time
with `zoneinfo`, with the DST choices `workflows.schedule.cron` documents: a time in a
spring-forward gap fires once at the end of the gap (at its second of the minute) unless the
expression names every hour; a time in a fall-back hour fires in its first copy, and in its
second too when the hour field begins with `*`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
EVERY_HOUR = frozenset(range(24))
# crontab(5)'s special strings (all but @reboot).
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


# The model looks this far ahead; results beyond COMPARED_YEARS are near the built-in's own
# horizon (50 years) and are not compared.
MODEL_YEARS = 60


COMPARED_YEARS = 40


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the values each field allows, and the flags the rules read."""

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_star: bool
    weekdays_star: bool
    hours_star: bool
    zone: ZoneInfo


def _value(text: str, names: list[str], first: int) -> int:
    lowered = text.lower()
    return names.index(lowered) + first if lowered in names else int(text)


def field_values(text: str, low: int, high: int, names: list[str] | None = None) -> frozenset[int]:
    """The values one field allows: a comma list of `*`, `v` or `a-b`, each optionally `/step`."""
    first = 1 if low == 1 else 0
    values: set[int] = set()
    for item in text.split(","):
        span, _, step = item.partition("/")
        if span == "*":
            start, end = low, high
        elif "-" in span:
            a, b = span.split("-")
            start, end = _value(a, names or [], first), _value(b, names or [], first)
        else:
            # A single value with a step runs to the end of the field (`5/15`: 5, 20, 35, 50).
            start = _value(span, names or [], first)
            end = high if step else start
        values.update(range(start, end + 1, int(step) if step else 1))
    return frozenset(values)


def parse(expression: str) -> Cron:
    """An expression of 5 fields, or 6 with leading seconds, optionally after `CRON_TZ=`."""
    text, zone = expression.strip(), ZoneInfo("UTC")
    if text.startswith("CRON_TZ="):
        name, _, text = text.removeprefix("CRON_TZ=").partition(" ")
        zone = ZoneInfo(name)
    fields = MACROS.get(text.lower(), text).split()
    seconds = field_values(fields.pop(0), 0, 59) if len(fields) == 6 else frozenset({0})
    minute, hour, day, month, weekday = fields
    weekdays = field_values(weekday, 0, 7, DAY_NAMES)
    return Cron(
        seconds=seconds,
        minutes=field_values(minute, 0, 59),
        hours=field_values(hour, 0, 23),
        days=field_values(day, 1, 31),
        months=field_values(month, 1, 12, MONTH_NAMES),
        weekdays=frozenset(0 if value == 7 else value for value in weekdays),
        days_star=day.startswith("*"),
        weekdays_star=weekday.startswith("*"),
        hours_star=hour.startswith("*"),
        zone=zone,
    )


def day_fires(cron: Cron, day: date) -> bool:
    if day.month not in cron.months:
        return False
    by_day, by_weekday = day.day in cron.days, day.isoweekday() % 7 in cron.weekdays
    if cron.days_star or cron.weekdays_star:
        return by_day and by_weekday
    return by_day or by_weekday


MINUTE = 60


# Far more than any change of a zone's offset between two dates: a jump over days that do
# not fire lands this much early, so no instant of a firing day is passed over.
JUMP_MARGIN = timedelta(hours=6)


def _wall(moment: int, zone: ZoneInfo) -> datetime:
    """The local wall time (naive) at an epoch second."""
    return datetime.fromtimestamp(moment, zone).replace(tzinfo=None)


def _wall_minute_fires(cron: Cron, wall: datetime) -> bool:
    return day_fires(cron, wall.date()) and wall.hour in cron.hours and wall.minute in cron.minutes


def _copy_fires(cron: Cron, moment: int, ambiguous: str) -> bool:
    """Whether the instant `moment` fires for its wall time: always, unless that wall time
    happens twice (the clock fell back), when only the copies the rules pick fire."""
    local = datetime.fromtimestamp(moment, cron.zone)
    repeated = local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset()
    if not repeated or cron.hours_star or ambiguous == "both":
        return True
    return local.fold == (1 if ambiguous == "last" else 0)


def _next_firing_day(cron: Cron, day: date, last: date) -> date | None:
    while day <= last:
        if day_fires(cron, day):
            return day
        day += timedelta(days=1)
    return None


def model_next(
    expression: str, after_ms: int, policy: tuple[str, str] = ("shift", "first")
) -> int | None:
    """The model's first firing strictly after `after_ms`, in epoch ms.

    It walks instants, not wall times: every UTC minute from `after_ms` on, read as a local
    wall time by `zoneinfo`. A minute whose wall time matches fires at each of its seconds
    (a repeated wall time only in the copies the rules pick); when the wall clock jumps
    forward between two minutes, each matching wall time it jumped over fires at the minute
    after the jump (at its own second), unless the expression names every hour or
    `nonexistent` is `skip`, and only for a search from before the jump. Days that cannot
    fire are jumped over by the calendar alone."""
    nonexistent, ambiguous = policy
    cron = parse(expression)
    after = after_ms // 1000
    end = after + MODEL_YEARS * 366 * 86_400
    moment = after - after % MINUTE
    previous = _wall(moment - MINUTE, cron.zone)
    while moment <= end:
        wall = _wall(moment, cron.zone)
        if not day_fires(cron, wall.date()) and wall - previous == timedelta(minutes=1):
            firing_day = _next_firing_day(cron, wall.date(), date(wall.year + MODEL_YEARS, 1, 1))
            if firing_day is None:
                return None
            if firing_day > wall.date():
                midnight = datetime(firing_day.year, firing_day.month, firing_day.day)
                jump = int((midnight - wall - JUMP_MARGIN).total_seconds()) // MINUTE * MINUTE
                if jump > 0:
                    moment += jump
                    previous = _wall(moment - MINUTE, cron.zone)
                    continue
        found: list[int] = []
        if _wall_minute_fires(cron, wall) and _copy_fires(cron, moment, ambiguous):
            found += [moment + second for second in cron.seconds]
        # A gap fires once: from a moment at or past its end, its wall times are behind.
        skipped = previous + timedelta(minutes=1) if moment > after else wall
        while skipped < wall:
            if (
                _wall_minute_fires(cron, skipped)
                and cron.hours != EVERY_HOUR
                and nonexistent != "skip"
            ):
                found += [moment + second for second in cron.seconds]
            skipped += timedelta(minutes=1)
        later = [candidate for candidate in found if candidate > after]
        if later:
            return min(later) * 1000
        previous = wall
        moment += MINUTE
    return None
