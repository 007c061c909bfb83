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

Days follow classic (Vixie) cron: when the day-of-month or the day-of-week field begins
with ``*`` (``*``, ``*/2``), a day must match both fields; only when both are restricted
(``0 0 1,15 * 5``: the 1st, the 15th and every Friday) does a day matching either fire.
Day-of-week 0 and 7 are Sunday; months and days of the week also take their English
three-letter names (``jan``, ``mon-fri``).

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
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter


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


def _cron_fields(body: str) -> list[str]:
    fields = SHORTHANDS.get(body.lower(), body).split()
    if len(fields) not in (5, 6):
        raise ValueError(
            f"cron expression must have 5 fields (or 6 with leading seconds), got {body!r}"
        )
    cron = " ".join(fields)
    if not croniter.is_valid(cron, second_at_beginning=len(fields) == 6):
        raise ValueError(f"invalid cron expression {body!r}")
    return fields


def validate(expression: str) -> None:
    """Raise ValueError (naming the expression) unless the built-in parser understands it."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError(f"expression must be a non-empty string, got {expression!r}")
    zone, body = _split_zone(expression)
    if body.startswith("@every"):
        if zone is not None:
            raise ValueError(f"CRON_TZ does not apply to @every, got {expression!r}")
        parse_every(body[len("@every") :])
        return
    _cron_fields(body)


@functools.lru_cache(maxsize=256)
def day_rule_matters(expression: str) -> bool:
    """Whether `next_occurrence`'s `classic_day_rule` changes when `expression` fires: cron
    whose day-of-month and day-of-week fields are both restricted, one of them beginning with
    ``*``. False for anything else, including what the built-in parser does not understand."""
    try:
        validate(expression)
    except ValueError:
        return False
    _, body = _split_zone(expression)
    if body.startswith("@every"):
        return False
    fields = _cron_fields(body)
    day_of_month, day_of_week = fields[-3], fields[-1]
    if not (day_of_month.startswith("*") or day_of_week.startswith("*")):
        return False
    # croniter ORs the two fields (unless told the classic rule) exactly when neither one's
    # expansion starts with its "every day" mark.
    expanded, _ = croniter.expand(" ".join(fields), second_at_beginning=len(fields) == 6)
    return expanded[_DAY_OF_MONTH][0] != "*" and expanded[_DAY_OF_WEEK][0] != "*"


def next_occurrence(expression: str, after_ms: int, *, classic_day_rule: bool = True) -> int | None:
    """The first firing time of `expression` strictly after `after_ms` (epoch ms), or None.

    `classic_day_rule=False` ORs the two day fields whenever both are restricted, even when
    one begins with ``*``: how schedules recorded before the classic rule fired."""
    validate(expression)
    zone, body = _split_zone(expression)
    if body.startswith("@every"):
        step = parse_every(body[len("@every") :])
        return (after_ms // step + 1) * step
    fields = _cron_fields(body)
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


def classic_next_at(expression: str, next_at: int) -> int | None:
    """A next tick found with `classic_day_rule=False`, under the classic rule: the same time
    when classic cron fires then too, else its next firing after it. A time that search
    would not find again (one moved past a DST gap) is kept."""
    if next_occurrence(expression, next_at - 1, classic_day_rule=False) != next_at:
        return next_at
    return next_occurrence(expression, next_at - 1)


def _is_repeated(local: datetime) -> bool:
    """Whether this wall time also existed an offset earlier (the second copy, fold=1)."""
    return local.replace(fold=0).utcoffset() != local.utcoffset()
