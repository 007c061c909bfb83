"""Cron fields read as crontab(5) reads them, and the search for the next matching instant.

A small parser of our own (see `docs/cron.md` for why not a library): each field becomes the
set of values it allows, built item by item from its comma list, so every item means the
same wherever it stands:

- ``*`` is the whole range; ``a`` one value; ``a-b`` the values from a to b (``9-9`` is just
  9); ``a-b/n``, ``*/n`` every n-th value of the range from its start; ``a/n`` every n-th
  value from a to the end of the field (as cronie, croniter and Go's cron read it);
- months and days of the week also take English three-letter names, in any case, in
  ranges too (``mon-fri``, ``jan-jun/2``); day-of-week 7 is Sunday, like 0;
- a range that runs backwards (``5-2``, ``sat-sun``), a step of 0, a value outside the field,
  and the extensions no crontab(5) knows (``L``, ``W``, ``#``, ``?``, ``H``) are refused,
  naming the field and the item.

Days follow Vixie cron's code: when the day-of-month or the day-of-week field *begins* with
``*`` a day must match both, otherwise either. Daylight saving: a wall time inside a
spring-forward gap fires once at the end of the gap (at its second of the minute), unless
the hours field allows every hour; a wall time inside a fall-back hour fires in its first
copy, and in the second too when the hours field begins with ``*``.

Pure: no Temporal, no croniter; deterministic, so it runs inside workflow code.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
FIELD_NAMES_5 = ("minute", "hour", "day-of-month", "month", "day-of-week")
FIELD_NAMES_6 = ("second", *FIELD_NAMES_5)
_RANGES = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day-of-month": (1, 31),
    "month": (1, 12),
    "day-of-week": (0, 7),
}
_NAMES = {"month": MONTH_NAMES, "day-of-week": DAY_NAMES}
_ITEM = re.compile(r"^(?:(\*)|([0-9a-z]+)(?:-([0-9a-z]+))?)(?:/([0-9]+))?$")
ALL_HOURS = frozenset(range(24))
# How far a zone's offset ever moves at once (hours): a fall-back this far ahead can make an
# earlier wall time fire again.
_LARGEST_SHIFT_HOURS = 3


@dataclass(frozen=True)
class CronFields:
    """What an expression allows: sorted values per field and the flags the rules read."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday (7 is read as 0)
    days_star: bool  # the day-of-month field begins with `*`
    weekdays_star: bool
    hours_star: bool

    def day_matches(self, day: date) -> bool:
        """Whether `day` fires: its month matches, and its day fields by the Vixie rule."""
        if day.month not in self.months:
            return False
        by_day, by_weekday = day.day in self.days, day.isoweekday() % 7 in self.weekdays
        if self.days_star or self.weekdays_star:
            return by_day and by_weekday
        return by_day or by_weekday


def _value(field: str, text: str, item: str) -> int:
    names = _NAMES.get(field, ())
    if text in names:
        return names.index(text) + (1 if field == "month" else 0)
    if not text.isdigit():
        raise ValueError(f"{field} field: {item!r} is not a number{' or name' if names else ''}")
    value = int(text)
    low, high = _RANGES[field]
    if not low <= value <= high:
        raise ValueError(f"{field} field: {item!r} is outside {low}-{high}")
    return value


def field_values(field: str, text: str) -> frozenset[int]:
    """The values one field allows, or ValueError naming the field and the item."""
    low, high = _RANGES[field]
    values: set[int] = set()
    for item in text.split(","):
        match = _ITEM.match(item.lower())
        if match is None:
            raise ValueError(f"{field} field: {item!r} is not supported")
        star, first, last, step_text = match.groups()
        step = 1 if step_text is None else int(step_text)
        if step == 0:
            raise ValueError(f"{field} field: {item!r} has a step of 0")
        if star:
            start, end = low, high
        else:
            start = _value(field, first, item)
            if last is not None:
                end = _value(field, last, item)
                if end < start:
                    raise ValueError(f"{field} field: {item!r} runs backwards")
            else:
                end = high if step_text is not None else start
        values.update(range(start, end + 1, step))
    if field == "day-of-week":
        values = {0 if value == 7 else value for value in values}
    return frozenset(values)


def parse_fields(fields: list[str]) -> CronFields:
    """5 fields, or 6 with leading seconds, read as crontab(5) reads them; ValueError else."""
    if len(fields) not in (5, 6):
        raise ValueError(f"a cron expression has 5 fields (or 6 with seconds), got {len(fields)}")
    names = FIELD_NAMES_6 if len(fields) == 6 else FIELD_NAMES_5
    text = dict(zip(names, fields, strict=True))
    values = {name: field_values(name, text[name]) for name in names}
    return CronFields(
        seconds=tuple(sorted(values.get("second", {0}))),
        minutes=tuple(sorted(values["minute"])),
        hours=tuple(sorted(values["hour"])),
        days=values["day-of-month"],
        months=values["month"],
        weekdays=values["day-of-week"],
        days_star=text["day-of-month"].startswith("*"),
        weekdays_star=text["day-of-week"].startswith("*"),
        hours_star=text["hour"].startswith("*"),
    )


def _wall_times(cron: CronFields, start: datetime, end: date) -> Iterator[datetime]:
    """Every matching wall time from `start` on (naive, local), in order, until `end`."""
    day = start.date()
    while day < end:
        if day.month not in cron.months:
            # On to the first of the next month.
            day = date(day.year + day.month // 12, day.month % 12 + 1, 1)
            continue
        if cron.day_matches(day):
            for hour in cron.hours:
                if (day, hour) < (start.date(), start.hour):
                    continue
                for minute in cron.minutes:
                    for second in cron.seconds:
                        wall = datetime(day.year, day.month, day.day, hour, minute, second)
                        if wall >= start:
                            yield wall
        day += timedelta(days=1)


def _gap_end(zone: ZoneInfo, before: int, after: int) -> int:
    """The first epoch second in (before, after] on the offset `after` has."""
    offset = datetime.fromtimestamp(after, zone).utcoffset()
    while after - before > 1:
        middle = (before + after) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset:
            after = middle
        else:
            before = middle
    return after


@dataclass(frozen=True)
class DaylightSaving:
    """The choices for wall times a change of offset skips (`nonexistent`: `shift` to the
    end of the gap, or `skip`) or repeats (`ambiguous`: `first`, `last` or `both` copies),
    for an expression that names them by hour."""

    nonexistent: str = "shift"
    ambiguous: str = "first"


CRONTAB_DST = DaylightSaving()


def _instants(
    cron: CronFields, zone: ZoneInfo, wall: datetime, dst: DaylightSaving
) -> tuple[int | None, int | None]:
    """The epoch seconds a wall time fires at: (its first, the second copy of a repeat)."""
    earlier = int(wall.replace(tzinfo=zone, fold=0).timestamp())
    later = int(wall.replace(tzinfo=zone, fold=1).timestamp())
    if datetime.fromtimestamp(earlier, zone).replace(tzinfo=None) != wall:
        # In a spring-forward gap: fold 0 reads it on the offset before, fold 1 after.
        if frozenset(cron.hours) == ALL_HOURS or dst.nonexistent == "skip":
            return None, None
        return _gap_end(zone, min(earlier, later), max(earlier, later)) + wall.second, None
    if earlier == later:
        return earlier, None
    if cron.hours_star or dst.ambiguous == "both":
        return earlier, later
    # Only the second copy: no later wall time fires before it (they come after the repeat).
    return (later, None) if dst.ambiguous == "last" else (earlier, None)


def _search_start(after: datetime, zone: ZoneInfo) -> datetime:
    """The wall time to search from: `after`'s, or earlier when the clock falls back within
    the next hours (earlier wall times then fire again, in the repeated hour's second copy)."""
    quarter = timedelta(minutes=15)
    steps = _LARGEST_SHIFT_HOURS * 4
    walls = [(after + quarter * k).astimezone(zone).replace(tzinfo=None) for k in range(steps + 1)]
    start = min(walls)
    # Sampled every quarter hour: the repeat may begin up to a quarter before the sample.
    return start - quarter if start < walls[0] else start


def next_instant(
    cron: CronFields,
    zone: ZoneInfo,
    after_ms: int,
    years: int,
    dst: DaylightSaving = CRONTAB_DST,
) -> int | None:
    """The first firing of `cron` in `zone` strictly after `after_ms` (epoch ms), searching
    `years` ahead; None when nothing matches in that time."""
    after = datetime.fromtimestamp(after_ms // 1000, UTC)
    start = _search_start(after, zone)
    end = date(min(start.year + years, 9998), 1, 1)
    best: int | None = None
    for wall in _wall_times(cron, start, end):
        first, second = _instants(cron, zone, wall, dst)
        for candidate in (first, second):
            if candidate is not None and candidate * 1000 > after_ms:
                best = candidate if best is None else min(best, candidate)
        if first is not None and first * 1000 > after_ms:
            # Later wall times fire later; only second copies of earlier ones came first.
            return None if best is None else best * 1000
    return None
