"""The built-in next_occurrence: cron with 5 and 6 fields, shorthands, @every, CRON_TZ/DST."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workflows.schedule.cron import (
    classic_next_at,
    day_rule_matters,
    next_occurrence,
    parse_every,
    validate,
)


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp() * 1000)


def iso(value: int | None) -> str | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fires(expression: str, after: int, count: int) -> list[str | None]:
    out: list[str | None] = []
    for _ in range(count):
        found = next_occurrence(expression, after)
        out.append(iso(found))
        if found is None:
            break
        after = found
    return out


def test_five_field_cron_fires_at_minute_resolution() -> None:
    assert fires("*/15 * * * *", ms(2026, 1, 1, 0, 7), 3) == [
        "2026-01-01T00:15:00Z",
        "2026-01-01T00:30:00Z",
        "2026-01-01T00:45:00Z",
    ]


def test_six_field_cron_reads_the_leading_field_as_seconds() -> None:
    assert fires("*/20 * * * * *", ms(2026, 1, 1, 0, 0, 5), 3) == [
        "2026-01-01T00:00:20Z",
        "2026-01-01T00:00:40Z",
        "2026-01-01T00:01:00Z",
    ]
    # "30 1 * * * *" is second 30 of minute 1 of every hour, not minute 30 of hour 1
    assert fires("30 1 * * * *", ms(2026, 1, 1), 2) == [
        "2026-01-01T00:01:30Z",
        "2026-01-01T01:01:30Z",
    ]


@pytest.mark.parametrize(
    ("shorthand", "expected"),
    [
        ("@hourly", "2026-03-04T06:00:00Z"),
        ("@daily", "2026-03-05T00:00:00Z"),
        ("@midnight", "2026-03-05T00:00:00Z"),
        ("@weekly", "2026-03-08T00:00:00Z"),
        ("@monthly", "2026-04-01T00:00:00Z"),
        ("@yearly", "2027-01-01T00:00:00Z"),
        ("@annually", "2027-01-01T00:00:00Z"),
    ],
)
def test_shorthands(shorthand: str, expected: str) -> None:
    assert iso(next_occurrence(shorthand, ms(2026, 3, 4, 5, 6, 7))) == expected


def test_the_result_is_strictly_after_even_on_a_match_and_with_milliseconds() -> None:
    assert iso(next_occurrence("0 * * * *", ms(2026, 1, 1, 1))) == "2026-01-01T02:00:00Z"
    assert next_occurrence("* * * * * *", ms(2026, 1, 1) + 999) == ms(2026, 1, 1, 0, 0, 1)


def test_an_expression_that_never_matches_has_no_next_occurrence() -> None:
    assert next_occurrence("0 0 30 2 *", ms(2026, 1, 1)) is None


@pytest.mark.parametrize(
    ("duration", "millis"),
    [("1s", 1000), ("500ms", 500), ("1h30m", 5_400_000), ("2m3s", 123_000), ("1h", 3_600_000)],
)
def test_every_parses_go_durations(duration: str, millis: int) -> None:
    assert parse_every(duration) == millis


def test_every_aligns_to_multiples_of_the_duration_since_the_epoch() -> None:
    assert fires("@every 1h30m", ms(2026, 1, 1, 0, 0, 5), 3) == [
        "2026-01-01T01:30:00Z",
        "2026-01-01T03:00:00Z",
        "2026-01-01T04:30:00Z",
    ]
    assert next_occurrence("@every 500ms", 1_250) == 1_500
    assert next_occurrence("@every 1s", 2_000) == 3_000


@given(step=st.integers(1, 10**8), after=st.integers(0, 2**45))
def test_every_is_the_next_multiple_strictly_after(step: int, after: int) -> None:
    found = next_occurrence(f"@every {step}ms", after)
    assert found is not None and found > after and found % step == 0 and found - after <= step


@given(after=st.integers(0, 2**42))
def test_cron_results_are_strictly_after_and_on_a_matching_minute(after: int) -> None:
    found = next_occurrence("*/7 * * * *", after)
    assert found is not None and found > after
    moment = datetime.fromtimestamp(found / 1000, UTC)
    assert moment.second == 0 and moment.minute % 7 == 0


NEW_YORK = "CRON_TZ=America/New_York "


def test_cron_tz_fires_on_local_wall_time() -> None:
    assert iso(next_occurrence(NEW_YORK + "0 9 * * *", ms(2026, 1, 5))) == "2026-01-05T14:00:00Z"
    assert iso(next_occurrence(NEW_YORK + "0 9 * * *", ms(2026, 7, 5))) == "2026-07-05T13:00:00Z"


def test_spring_forward_hourly_fires_every_real_hour_and_skips_no_run() -> None:
    # 2026-03-08 02:00 EST does not exist: 01:00 EST (06:00Z) is followed by 03:00 EDT (07:00Z)
    assert fires(NEW_YORK + "0 * * * *", ms(2026, 3, 8, 5, 30), 3) == [
        "2026-03-08T06:00:00Z",
        "2026-03-08T07:00:00Z",
        "2026-03-08T08:00:00Z",
    ]


def test_spring_forward_a_fixed_time_in_the_gap_fires_once_right_after_it() -> None:
    assert fires(NEW_YORK + "30 2 * * *", ms(2026, 3, 7, 12), 3) == [
        "2026-03-08T07:00:00Z",  # 03:00 EDT, the first instant after the gap
        "2026-03-09T06:30:00Z",
        "2026-03-10T06:30:00Z",
    ]


def test_fall_back_hourly_fires_in_both_copies_of_the_repeated_hour() -> None:
    # 2026-11-01 01:00-02:00 happens twice: EDT (05:00Z) then EST (06:00Z)
    assert fires(NEW_YORK + "0 * * * *", ms(2026, 11, 1, 4, 30), 3) == [
        "2026-11-01T05:00:00Z",
        "2026-11-01T06:00:00Z",
        "2026-11-01T07:00:00Z",
    ]


def test_fall_back_a_fixed_time_in_the_repeated_hour_fires_once() -> None:
    assert fires(NEW_YORK + "30 1 * * *", ms(2026, 10, 31, 12), 3) == [
        "2026-11-01T05:30:00Z",
        "2026-11-02T06:30:00Z",
        "2026-11-03T06:30:00Z",
    ]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "expression must be a non-empty string"),
        ("* * * *", "has 5 fields (or 6 with seconds), got 4"),
        ("61 * * * *", "minute field: '61' is outside 0-59 in '61 * * * *'"),
        ("0 0 * * 8", "day-of-week field: '8' is outside 0-7"),
        ("0 0 0 * *", "day-of-month field: '0' is outside 1-31"),
        ("*/0 * * * *", "minute field: '*/0' has a step of 0"),
        ("0 0 * * 5L", "day-of-week field: '5L' is not a number or name"),
        ("H * * * *", "minute field: 'H' is not a number"),
        ("0 0 * * mon-fry", "day-of-week field: 'mon-fry' is not a number or name"),
        ("0 0 * mon *", "month field: 'mon' is not a number or name"),
        ("0 jan * * *", "hour field: 'jan' is not a number in"),
        ("@every", "@every needs a duration"),
        ("@every 1 s", "@every needs a duration"),
        ("@every 1d", "@every needs a duration"),
        ("@every 0s", "must be positive"),
        ("@fortnightly", "unknown macro '@fortnightly'"),
        ("CRON_TZ=Mars/Olympus 0 * * * *", "unknown time zone, got 'Mars/Olympus'"),
        ("CRON_TZ=UTC @every 1s", "CRON_TZ does not apply to @every"),
    ],
)
def test_bad_expressions_raise_value_error_naming_them(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        validate(expression)
    with pytest.raises(ValueError):
        next_occurrence(expression, 0)


def test_a_day_field_beginning_with_a_star_ands_the_two_day_fields() -> None:
    # odd days of the month that are Wednesdays (classic cron), not odd days or Wednesdays
    assert fires("0 0 */2 * 3", ms(2026, 12, 2), 2) == [
        "2026-12-09T00:00:00Z",
        "2026-12-23T00:00:00Z",
    ]
    assert fires("0 0 */2 * 3", ms(2026, 12, 2), 2) == fires("0 0 */2 * wed", ms(2026, 12, 2), 2)
    # both restricted: either matches (the 1st, the 15th and every Friday)
    assert fires("30 4 1,15 * 5", ms(2026, 1, 1), 3) == [
        "2026-01-01T04:30:00Z",
        "2026-01-02T04:30:00Z",
        "2026-01-09T04:30:00Z",
    ]


def test_the_day_rule_of_schedules_recorded_before_it_ors_them() -> None:
    assert fires_ored("0 0 */2 * 3", ms(2026, 12, 2)) == "2026-12-03T00:00:00Z"
    assert fires_ored("0 0 * * 3", ms(2026, 12, 2)) == "2026-12-09T00:00:00Z"


def fires_ored(expression: str, after: int) -> str | None:
    return iso(next_occurrence(expression, after, classic_day_rule=False))


@pytest.mark.parametrize(
    ("expression", "matters"),
    [
        ("0 0 */2 * 3", True),
        ("*/2 * * */2 * 3", True),
        ("CRON_TZ=Europe/Berlin 0 0 1,15 * */2", True),
        ("0 0 */1 * mon", True),  # croniter reads `*/1` as the list of every day
        ("0 0 * * 3", False),  # a bare `*` is every day under either rule
        ("0 0 1 * 3", False),  # both restricted: ORed under either rule
        ("0 0 1-31 * */2", False),
        ("0 0 *,5 * 1", False),  # croniter reads a list holding `*` as `*`
        ("@weekly", False),
        ("@every 1s", False),
        ("not cron", False),
    ],
)
def test_day_rule_matters_names_the_expressions_whose_times_it_changes(
    expression: str, matters: bool
) -> None:
    assert day_rule_matters(expression) is matters
    if not matters and expression != "not cron":
        after = ms(2026, 12, 2)
        assert next_occurrence(expression, after) == next_occurrence(
            expression, after, classic_day_rule=False
        )


def test_classic_next_at_moves_a_tick_only_classic_cron_skips() -> None:
    ored = ms(2026, 12, 3)  # Thursday the 3rd: odd, not a Wednesday
    assert iso(classic_next_at("0 0 */2 * 3", ored)) == "2026-12-09T00:00:00Z"
    assert classic_next_at("0 0 */2 * 3", ms(2026, 12, 9)) == ms(2026, 12, 9)
    # a tick moved past a DST gap is not found again by a search, so it is kept
    gap = ms(2026, 3, 8, 7, 0, 1)  # 02:00:01 EST does not exist: 03:00:01 EDT
    assert classic_next_at("CRON_TZ=America/New_York 1 * 2 * * *", gap) == gap


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 0 L * *", "day-of-month field: 'L' is not a number"),
        ("0 0 15W * *", "day-of-month field: '15W' is not a number"),
        ("0 0 * * 5#2", "day-of-week field: '5#2' is not supported"),
        ("0 0 ? * *", "day-of-month field: '?' is not supported"),
        ("0 5-2 * * *", "hour field: '5-2' runs backwards"),
        ("0 0 * * sat-sun", "day-of-week field: 'sat-sun' runs backwards"),
    ],
)
def test_extensions_crontab_does_not_know_are_refused_naming_the_field(
    expression: str, message: str
) -> None:
    """Refused for a new `set`; an older build that took one keeps computing its times."""
    with pytest.raises(ValueError, match=re.escape(message)):
        validate(expression)
    assert next_occurrence(expression, 0) is not None


@pytest.mark.parametrize(
    ("expression", "first"),
    [
        ("0 9-9 * * *", "1970-01-01T09:00:00+00:00"),  # once a day, not every hour
        ("7 18 13 1-1/3 *", "1970-01-13T18:07:00+00:00"),
        ("39-39/5 * * * *", "1970-01-01T00:39:00+00:00"),
        ("5/20 * * * *", "1970-01-01T00:05:00+00:00"),
        ("0 0 * * 7", "1970-01-04T00:00:00+00:00"),  # 7 is Sunday
        ("0 0 * * fri-7", "1970-01-02T00:00:00+00:00"),
        ("0 0 * jan-jan/3 *", "1970-01-02T00:00:00+00:00"),
        ("@WEEKLY", "1970-01-04T00:00:00+00:00"),
        ("30 * * * * *", "1970-01-01T00:00:30+00:00"),
    ],
)
def test_fields_read_as_crontab_reads_them(expression: str, first: str) -> None:
    found = next_occurrence(expression, 0)
    assert found is not None
    assert datetime.fromtimestamp(found / 1000, UTC).isoformat() == first
