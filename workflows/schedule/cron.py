"""The built-in `next_occurrence`: when an expression fires next, in epoch milliseconds.

Understood expressions:

- 5-field cron (minute resolution): ``*/5 * * * *``
- 6-field cron with a *leading* seconds field: ``*/10 * * * * *``
- shorthands: ``@yearly`` ``@annually`` ``@monthly`` ``@weekly`` ``@daily`` ``@midnight``
  ``@hourly``
- ``@every <duration>``: Go-style durations (``1s``, ``500ms``, ``1h30m``), firing at
  multiples of the duration since the Unix epoch (so every object on ``@every 1m`` fires at
  whole minutes)
- an optional ``CRON_TZ=<IANA zone> `` prefix for cron and shorthands (default UTC).

Cron fields are read as crontab(5) reads them (`workflows.schedule.crontab`, see
`docs/cron.md`): ``9-9`` is 9, a ``*`` anywhere in a list is the whole range, ``a/n`` runs to
the field's end. Days follow classic (Vixie) cron: when the day-of-month or the day-of-week
field begins with ``*`` (``*``, ``*/2``), a day must match both fields; only when both are
restricted (``0 0 1,15 * 5``: the 1st, the 15th and every Friday) does a day matching
either fire. Day-of-week 0 and 7 are Sunday; months and days of the week also take their
English three-letter names (``jan``, ``mon-fri``). croniter's reading is kept only so that a
history without the readings' patches replays (`next_occurrence`'s flags).

Daylight saving follows cron's habit: on a spring-forward day the times inside the skipped
hour fire once, right after the gap (at their second of the minute, with a seconds field),
unless the expression names every hour (``30 * * * *``, ``30 0-23 * * *``), which just goes
on at its next real time; on a fall-back day a time inside the repeated hour fires once
(its first occurrence), while an expression whose hour field begins with ``*``
(``0 * * * *``, ``0 */2 * * *``) fires in both copies of the repeated hour.

Plugging in your own: anything matching :class:`NextOccurrence` works. Subclass the schedule
workflow and set ``next_occurrence`` (see ``workflows.schedule.workflow``). The function must
be deterministic (it runs inside workflow code), return ``None`` or an int strictly after
``after_ms``, and raise ``ValueError`` for an expression it does not understand.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from workflows.schedule import crontab


class NextOccurrence(Protocol):
    """`(expression, after_ms) -> first firing time strictly after after_ms, or None`."""

    def __call__(self, expression: str, after_ms: int, /) -> int | None: ...


SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_UNITS_MS = {"h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
_DURATION_PART = re.compile(r"(\d+)(ms|h|m|s)")
# Cron search horizon: an expression that matches nothing within it (e.g. 30 February)
# has no next occurrence.
_MAX_YEARS = 50
# The longest `@every`: the same horizon, so every next occurrence is a time that timers,
# datetimes and search attributes can hold.
MAX_EVERY_MS = 366 * 24 * 3_600_000 * _MAX_YEARS
# Where croniter's expansion (seconds moved last) keeps the two day fields.
_DAY_OF_MONTH, _DAY_OF_WEEK = 2, 4


def parse_every(duration: str) -> int:
    """A Go-style duration (`1h30m`, `500ms`) in milliseconds; ValueError when malformed."""
    text = duration.strip()
    total, position = 0, 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += int(match.group(1)) * _UNITS_MS[match.group(2)]
        position = match.end()
    if not text or position != len(text):
        raise ValueError(f"@every needs a duration like 1s, 500ms or 1h30m, got {duration!r}")
    if total <= 0:
        raise ValueError(f"@every duration must be positive, got {duration!r}")
    if total > MAX_EVERY_MS:
        raise ValueError(
            f"@every duration must be at most {MAX_EVERY_MS // 3_600_000}h ({_MAX_YEARS} years), "
            f"got {duration!r}"
        )
    return total


def _split_zone(expression: str) -> tuple[ZoneInfo | None, str]:
    text = expression.strip()
    if not text.startswith("CRON_TZ="):
        return None, text
    zone_name, _, rest = text[len("CRON_TZ=") :].partition(" ")
    return _zone(zone_name), rest.strip()


@functools.lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    # Our own cache of private instances: ZoneInfo's shared cache can hand back an instance
    # that the workflow sandbox has wrapped, which datetime then rejects as a tzinfo.
    try:
        return ZoneInfo.no_cache(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: a name that is a directory of the zone database ("America"), or too long.
        raise ValueError(f"CRON_TZ names an unknown time zone, got {name!r:.100}") from None


def _legacy_fields(body: str) -> list[str]:
    """The fields as croniter reads them (the reading before crontab's), or ValueError."""
    fields = SHORTHANDS.get(body.lower(), body).split()
    if len(fields) not in (5, 6):
        raise ValueError(
            f"cron expression must have 5 fields (or 6 with leading seconds), got {body!r}"
        )
    cron = " ".join(fields)
    if not croniter.is_valid(cron, second_at_beginning=len(fields) == 6):
        raise ValueError(f"invalid cron expression {body!r}")
    return fields


@functools.lru_cache(maxsize=256)
def _crontab_fields(body: str) -> crontab.CronFields:
    """The fields as crontab(5) reads them, or ValueError naming the field and the item."""
    fields = SHORTHANDS.get(body.lower(), body).split()
    if body.startswith("@") and body.lower() not in SHORTHANDS:
        raise ValueError(f"unknown macro {body.split()[0]!r:.50}; known: {', '.join(SHORTHANDS)}")
    try:
        return crontab.parse_fields(fields)
    except ValueError as error:
        raise ValueError(f"{error} in {body!r:.200}") from None


def validate(expression: str) -> None:
    """Raise ValueError (naming the field and the item) unless the built-in reading
    understands `expression` as crontab(5) does: what a new `set` may hold."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError(f"expression must be a non-empty string, got {expression!r}")
    zone, body = _split_zone(expression)
    if body.startswith("@every"):
        if zone is not None:
            raise ValueError(f"CRON_TZ does not apply to @every, got {expression!r}")
        parse_every(body[len("@every") :])
        return
    _crontab_fields(body)


def _readable(expression: str) -> None:
    """Raise ValueError unless some reading (crontab's, or croniter's for an expression a
    history without the patches stored) can compute times of `expression`."""
    try:
        validate(expression)
    except ValueError:
        _, body = _split_zone(expression)
        if body.startswith("@every"):
            raise
        try:
            _legacy_fields(body)
        except ValueError:
            raise ValueError(_refusal(expression)) from None


def _refusal(expression: str) -> str:
    try:
        validate(expression)
    except ValueError as error:
        return str(error)
    return ""


def _full(values: list[Any], low: int, high: int) -> frozenset[int] | None:
    """A croniter expansion as a set of values; None when it holds more than numbers."""
    if values == ["*"]:
        return frozenset(range(low, high + 1))
    if all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        return frozenset(values)
    return None


def _days(
    days: frozenset[int], weekdays: frozenset[int], either: bool
) -> tuple[bool, frozenset[int], frozenset[int]]:
    """Which days fire, in one canonical form: "either field" with one field unrestricted
    is every day."""
    every_day, every_weekday = frozenset(range(1, 32)), frozenset(range(7))
    if either and (days == every_day or weekdays == every_weekday):
        return False, every_day, every_weekday
    return either, days, weekdays


@functools.lru_cache(maxsize=256)
def crontab_reading_matters(expression: str) -> bool:
    """Whether reading `expression` as crontab(5) does changes when it fires, compared with
    the croniter reading (without the patch): the values a field allows or how the day fields
    combine differ, or croniter refused it. False for what crontab's reading refuses (it
    keeps croniter's reading) and for `@every`."""
    try:
        validate(expression)
    except ValueError:
        return False
    _, body = _split_zone(expression)
    if body.startswith("@every"):
        return False
    fields = SHORTHANDS.get(body.lower(), body).split()
    ours = _crontab_fields(body)
    try:
        _legacy_fields(body)
        expanded, nth = croniter.expand(" ".join(fields), second_at_beginning=len(fields) == 6)
    except (CroniterError, ValueError):
        return True
    if nth:
        return True
    # croniter's expansion moves the seconds field last.
    limits = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7), (0, 59)]
    theirs = [_full(values, *limits[index]) for index, values in enumerate(expanded)]
    if any(values is None for values in theirs):
        return True
    minutes, hours, days, months, weekdays = (values or frozenset() for values in theirs[:5])
    weekdays = frozenset(0 if day == 7 else day for day in weekdays)
    seconds = (theirs[5] or frozenset()) if len(fields) == 6 else frozenset({0})
    day_text, weekday_text = fields[-3], fields[-1]
    their_either = (
        expanded[2][0] != "*"
        and expanded[4][0] != "*"
        and not (day_text.startswith("*") or weekday_text.startswith("*"))
    )
    our_either = not (ours.days_star or ours.weekdays_star)
    return (seconds, minutes, hours, months) != (
        frozenset(ours.seconds),
        frozenset(ours.minutes),
        frozenset(ours.hours),
        ours.months,
    ) or _days(days, weekdays, their_either) != _days(ours.days, ours.weekdays, our_either)


@functools.lru_cache(maxsize=256)
def day_rule_matters(expression: str) -> bool:
    """Whether `next_occurrence`'s `classic_day_rule` changes when `expression` fires: cron
    whose day-of-month and day-of-week fields are both restricted, one of them beginning with
    ``*``. False for anything else, including what the built-in parser does not understand."""
    try:
        _legacy_validate(expression)
    except ValueError:
        return False
    _, body = _split_zone(expression)
    if body.startswith("@every"):
        return False
    fields = _legacy_fields(body)
    day_of_month, day_of_week = fields[-3], fields[-1]
    if not (day_of_month.startswith("*") or day_of_week.startswith("*")):
        return False
    # croniter ORs the two fields (unless told the classic rule) exactly when neither one's
    # expansion starts with its "every day" mark.
    expanded, _ = croniter.expand(" ".join(fields), second_at_beginning=len(fields) == 6)
    return expanded[_DAY_OF_MONTH][0] != "*" and expanded[_DAY_OF_WEEK][0] != "*"


def _legacy_validate(expression: str) -> None:
    """croniter's check, for an expression read without crontab's reading."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError(f"expression must be a non-empty string, got {expression!r}")
    _, body = _split_zone(expression)
    if body.startswith("@every"):
        validate(expression)
        return
    _legacy_fields(body)


def next_occurrence(
    expression: str,
    after_ms: int,
    *,
    classic_day_rule: bool = True,
    crontab_reading: bool = True,
    dst: crontab.DaylightSaving = crontab.CRONTAB_DST,
) -> int | None:
    """The first firing time of `expression` strictly after `after_ms` (epoch ms), or None.

    Cron is read as crontab(5) reads it (`workflows.schedule.crontab`). croniter's reading is
    kept where a history without the patches needs it: `crontab_reading=False` for an
    expression the two readings differ on, `classic_day_rule=False` (the day fields ORed
    whenever both are restricted), and an expression crontab's reading refuses that croniter
    took (`L`, `#`, `W`, `?`), which only such a history can hold. `dst` chooses what
    a local time that daylight saving skips or repeats does (crontab's choices by default;
    croniter's reading keeps them)."""
    _readable(expression)
    zone, body = _split_zone(expression)
    if body.startswith("@every"):
        step = parse_every(body[len("@every") :])
        return (after_ms // step + 1) * step
    legacy = (
        not classic_day_rule
        or (not crontab_reading and crontab_reading_matters(expression))
        or _refusal(expression) != ""
    )
    if legacy:
        return _legacy_next(expression, after_ms, classic_day_rule=classic_day_rule)
    fields = _crontab_fields(body)
    return crontab.next_instant(fields, zone or _zone("UTC"), after_ms, _MAX_YEARS, dst)


def _legacy_next(expression: str, after_ms: int, *, classic_day_rule: bool) -> int | None:
    """croniter's reading, with this module's daylight-saving choices on top."""
    zone, body = _split_zone(expression)
    fields = _legacy_fields(body)
    has_seconds = len(fields) == 6
    hour_field = fields[2] if has_seconds else fields[1]
    zone = zone or _zone("UTC")
    # Whole seconds: croniter's search is strictly after its start, so flooring keeps the
    # result strictly after after_ms.
    cursor = datetime.fromtimestamp(after_ms // 1000, tz=UTC)
    horizon = cursor + timedelta(days=366 * _MAX_YEARS)
    while cursor < horizon:
        iterator = croniter(
            " ".join(fields),
            cursor.astimezone(zone),
            second_at_beginning=has_seconds,
            max_years_between_matches=_MAX_YEARS,
            # croniter's name for the classic rule: a day field beginning with `*` ANDs them.
            implement_cron_bug=classic_day_rule,
        )
        try:
            found: datetime = iterator.get_next(datetime)
        except CroniterError:
            return None
        found_utc = found.astimezone(UTC)
        if found_utc <= cursor:
            # Guard against a library step that does not move forward.
            cursor += timedelta(seconds=1)
            continue
        local = found_utc.astimezone(zone)
        if local.fold == 1 and _is_repeated(local) and not hour_field.startswith("*"):
            # Second copy of a fall-back hour: a fixed-time job already fired in the first.
            cursor = found_utc
            continue
        return int(found_utc.timestamp()) * 1000
    return None


def classic_next_at(expression: str, next_at: int, *, crontab_reading: bool = True) -> int | None:
    """A next tick found with `classic_day_rule=False`, under the classic rule: the same time
    when classic cron fires then too, else its next firing after it. A time that search
    would not find again (one moved past a DST gap) is kept, and so is any time of an
    expression the rule does not change."""
    if not day_rule_matters(expression):
        return next_at
    if next_occurrence(expression, next_at - 1, classic_day_rule=False) != next_at:
        return next_at
    return next_occurrence(expression, next_at - 1, crontab_reading=crontab_reading)


def crontab_next_at(expression: str, next_at: int) -> int | None:
    """A next tick found by croniter's reading, under crontab's: the same time when crontab's
    reading fires then too, else its next firing after it (a one-value range that croniter
    read as `*` does not fire again within the hour). A time that search would not find
    again (one moved past a DST gap) is kept, and so is any time of an expression both
    readings fire alike on."""
    if not crontab_reading_matters(expression):
        return next_at
    if next_occurrence(expression, next_at - 1, crontab_reading=False) != next_at:
        return next_at
    return next_occurrence(expression, next_at - 1)


def _is_repeated(local: datetime) -> bool:
    """Whether this wall time also existed an offset earlier (the second copy, fold=1)."""
    return local.replace(fold=0).utcoffset() != local.utcoffset()
