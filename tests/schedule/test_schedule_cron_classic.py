"""The built-in next_occurrence against an independent model of classic cron
(`tests.support.cron_model`), by hypothesis: random expressions, zones and start times, and
starts shortly before changes of offset."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.support.cron_model import (
    COMPARED_YEARS,
    model_next,
    parse,
)
from tests.support.cron_strategies import ZONES, cases, field, transitions
from workflows.schedule.cron import (
    _legacy_next,
    classic_next_at,
    crontab_reading_matters,
    next_occurrence,
)
from workflows.schedule.crontab import DaylightSaving


def dst_case(expression: str, found_ms: int) -> str:
    """How daylight saving bears on a firing (`--hypothesis-show-statistics` counts them)."""
    zone = parse(expression).zone
    local = datetime.fromtimestamp(found_ms / 1000, zone)
    if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
        return f"fires in copy {local.fold + 1} of a repeated hour"
    if found_ms // 1000 - local.second in transitions(zone.key):
        return "fires at the end of a gap"
    return "no change of offset"


def iso(value: int | None) -> str | None:
    return None if value is None else datetime.fromtimestamp(value / 1000, UTC).isoformat()


# --- the property ---


def ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
# The class that differs between the rules: a stepped `*` day field and a restricted one.
@example(case=("0 0 */2 * 3", ms(2026, 12, 2)))
@example(case=("30 4 1,15 * */2", ms(2026, 1, 1)))
@example(case=("CRON_TZ=Europe/Berlin */20 0 */3 * * mon", ms(2026, 3, 1)))
@example(case=("0 0 1-31 * */2", ms(2026, 1, 1)))  # a day-of-week `*/2` ANDs with all days
@example(case=("30 4 1,15 * 5", ms(2026, 1, 1)))  # both restricted: ORed
@example(case=("CRON_TZ=America/New_York 30 2 * * *", ms(2026, 3, 8)))  # spring-forward gap
@example(case=("CRON_TZ=America/New_York 0 */1 * * *", ms(2026, 11, 1)))  # fall-back, both
@example(case=("CRON_TZ=America/New_York 0 0-23 * * *", ms(2026, 11, 1)))  # fall-back, first
# Forms croniter read otherwise: a one-value range as `*`, a `*` after a list's first item.
@example(case=("0 9-9 * * *", ms(2026, 3, 1)))
@example(case=("14 14-14 14 * mon-tue", ms(2026, 3, 1)))
@example(case=("7 18 13 1-1/3 *", ms(2026, 3, 1)))
@example(case=("39-39/5 * * * *", ms(2026, 3, 1)))
@example(case=("0 0 2-3 * 0,*", ms(2026, 3, 3)))
@example(case=("CRON_TZ=Australia/Lord_Howe 15 2 * * *", ms(2026, 10, 3, 14)))  # 30-min gap
def test_next_occurrence_agrees_with_classic_cron(case: tuple[str, int]) -> None:
    agree(*case, steps=4)


@st.composite
def dst_cases(draw: st.DrawFn) -> tuple[str, int]:
    """Every day, random times of day, starting shortly before a change of offset."""
    zone = draw(st.sampled_from([name for name in ZONES if transitions(name)]))
    times = [draw(field(0, 59)), draw(field(0, 23, favoured=4))]
    if draw(st.booleans()):
        times.insert(0, draw(field(0, 59)))
    moment = draw(st.sampled_from(transitions(zone))) * 1000
    start = moment - draw(st.integers(0, 3 * 3_600_000))
    return f"CRON_TZ={zone} {' '.join(times)} * * *", start


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=dst_cases())
# A time moved past St John's midnight gap (2008), of an expression the day rule leaves alone.
@example(
    case=(
        "CRON_TZ=America/St_Johns 30-30/10,42-42/52,58 * 22-22/11,*/23,21-21 * * *",
        1_205_033_442_777,
    )
)
def test_next_occurrence_agrees_with_classic_cron_across_changes_of_offset(
    case: tuple[str, int],
) -> None:
    agree(*case, steps=6)


def agree(expression: str, after: int, steps: int) -> None:
    """The built-in and the model find the same next `steps` firings from `after`."""
    for _ in range(steps):
        expected = model_next(expression, after)
        found = next_occurrence(expression, after)
        if expected is None or expected - after > COMPARED_YEARS * 365 * 86_400_000:
            # At the built-in's horizon: it may stop searching first.
            assert found is None or found == expected, (expression, iso(after), iso(found))
            return
        assert found == expected, (expression, iso(after), iso(found), iso(expected))
        event(dst_case(expression, found))
        # A next tick the classic rule fires at is kept when a run checks it again.
        assert classic_next_at(expression, found) == found, (expression, iso(found))
        after = found


def firings(expression: str, after: int, count: int) -> list[str | None]:
    found: list[str | None] = []
    for _ in range(count):
        following = model_next(expression, after)
        found.append(iso(following))
        if following is None:
            break
        after = following
    return found


def test_the_model_reads_crontab_as_its_manual_does() -> None:
    """The model itself, on crontab(5)'s example and the rules it states."""
    # "30 4 1,15 * 5": 4:30 am on the 1st and 15th of each month, plus every Friday.
    assert firings("30 4 1,15 * 5", ms(2026, 1, 1), 4) == [
        "2026-01-01T04:30:00+00:00",
        "2026-01-02T04:30:00+00:00",
        "2026-01-09T04:30:00+00:00",
        "2026-01-15T04:30:00+00:00",
    ]
    # A day field beginning with `*`: both must match (odd days that are Mondays).
    assert firings("0 0 */2 * mon", ms(2026, 12, 1), 2) == [
        "2026-12-07T00:00:00+00:00",
        "2026-12-21T00:00:00+00:00",
    ]
    # 7 and 0 are Sunday; names in any case, in ranges too.
    assert parse("0 0 * * 7").weekdays == parse("0 0 * * SUN").weekdays == {0}
    assert parse("0 0 * * 5-7").weekdays == {5, 6, 0}
    assert parse("0 0 * Jan-Mar/2 *").months == {1, 3}
    assert parse("*/20 0 0 * * *").seconds == {0, 20, 40}
    assert firings("0 0 30 2 *", ms(2026, 1, 1), 1) == [None]


def test_the_model_takes_the_documented_dst_choices() -> None:
    new_york = "CRON_TZ=America/New_York "
    # 2026-03-08 02:00-03:00 does not exist: a time in it fires once, at 03:00 EDT (07:00Z).
    assert firings(new_york + "*/20 2 * * *", ms(2026, 3, 8), 2) == [
        "2026-03-08T07:00:00+00:00",
        "2026-03-09T06:00:00+00:00",
    ]
    # ... unless the expression names every hour.
    assert firings(new_york + "30 0-23 * * *", ms(2026, 3, 8, 6), 2) == [
        "2026-03-08T06:30:00+00:00",
        "2026-03-08T07:30:00+00:00",
    ]
    # 2026-11-01 01:00-02:00 happens twice (05:00Z EDT, 06:00Z EST).
    assert firings(new_york + "30 1 * * *", ms(2026, 11, 1), 2) == [
        "2026-11-01T05:30:00+00:00",
        "2026-11-02T06:30:00+00:00",
    ]
    assert firings(new_york + "30 */1 * * *", ms(2026, 11, 1, 5), 2) == [
        "2026-11-01T05:30:00+00:00",
        "2026-11-01T06:30:00+00:00",
    ]


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
@example(case=("0 9-9 * * *", ms(2026, 3, 1)))
@example(case=("0 0 1-31 * 1", ms(2026, 3, 3)))  # croniter ANDs a full day-of-month list
def test_the_reading_patch_is_asked_for_every_expression_whose_times_change(
    case: tuple[str, int],
) -> None:
    """Where `crontab_reading_matters` says no (no patch asked, so a history recorded by
    croniter's reading replays on crontab's), the two readings fire at the same times."""
    expression, after = case
    if crontab_reading_matters(expression):
        event("the reading matters")
        return
    for _ in range(2):
        found = next_occurrence(expression, after)
        assert next_occurrence(expression, after, crontab_reading=False) == found
        assert _legacy_next(expression, after, classic_day_rule=True) == found, expression
        if found is None:
            return
        after = found


POLICIES = [
    (nonexistent, ambiguous)
    for nonexistent in ("shift", "skip")
    for ambiguous in ("first", "last", "both")
]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=dst_cases(), policy=st.sampled_from(POLICIES))
@example(  # Lord Howe springs forward 30 minutes: 02:00 -> 02:30 on 2026-10-04
    case=("CRON_TZ=Australia/Lord_Howe 15 2 * * *", ms(2026, 10, 3, 14)), policy=("skip", "first")
)
@example(  # ... and falls back 30 minutes: 02:00 -> 01:30 on 2026-04-05
    case=("CRON_TZ=Australia/Lord_Howe 45 1 * * *", ms(2026, 4, 4, 13)), policy=("shift", "last")
)
@example(case=("CRON_TZ=America/New_York 30 1 * * *", ms(2026, 11, 1, 4)), policy=("shift", "both"))
def test_a_dst_policy_fires_as_the_model_says_across_changes_of_offset(
    case: tuple[str, int], policy: tuple[str, str]
) -> None:
    expression, after = case
    dst = DaylightSaving(*policy)
    for _ in range(4):
        expected = model_next(expression, after, policy)
        found = next_occurrence(expression, after, dst=dst)
        assert found == expected, (expression, policy, iso(after), iso(found), iso(expected))
        if found is None:
            return
        event(f"{policy}: {dst_case(expression, found)}")
        after = found


def test_the_dst_policies_on_real_transitions() -> None:
    """30-minute (Lord Howe) and 60-minute (New York) shifts, by hand."""
    lord_howe, new_york = "CRON_TZ=Australia/Lord_Howe ", "CRON_TZ=America/New_York "

    def fires(expression: str, after: int, policy: tuple[str, str], count: int) -> list[str]:
        found: list[str] = []
        for _ in range(count):
            following = next_occurrence(expression, after, dst=DaylightSaving(*policy))
            assert following is not None
            found.append(datetime.fromtimestamp(following / 1000, UTC).isoformat())
            after = following
        return found

    # 2026-10-04 02:00-02:30 does not exist at Lord Howe (+10:30 -> +11).
    gap = lord_howe + "15 2 * * *"
    assert fires(gap, ms(2026, 10, 3, 12), ("shift", "first"), 2) == [
        "2026-10-03T15:30:00+00:00",  # 02:30 +11, the end of the gap
        "2026-10-04T15:15:00+00:00",
    ]
    assert fires(gap, ms(2026, 10, 3, 12), ("skip", "first"), 1) == ["2026-10-04T15:15:00+00:00"]
    # 2026-04-05 01:30-02:00 happens twice (+11, then +10:30).
    repeat = lord_howe + "45 1 * * *"
    start = ms(2026, 4, 4, 12)
    assert fires(repeat, start, ("shift", "first"), 1) == ["2026-04-04T14:45:00+00:00"]
    assert fires(repeat, start, ("shift", "last"), 1) == ["2026-04-04T15:15:00+00:00"]
    assert fires(repeat, start, ("shift", "both"), 2) == [
        "2026-04-04T14:45:00+00:00",
        "2026-04-04T15:15:00+00:00",
    ]
    # New York, 2026-11-01 01:00-02:00 twice (EDT, then EST).
    assert fires(new_york + "30 1 * * *", ms(2026, 11, 1), ("shift", "last"), 2) == [
        "2026-11-01T06:30:00+00:00",
        "2026-11-02T06:30:00+00:00",
    ]
    # An hours field beginning with `*` goes on hourly whatever the policy.
    assert fires(new_york + "30 * * * *", ms(2026, 11, 1, 4), ("skip", "first"), 3) == [
        "2026-11-01T04:30:00+00:00",
        "2026-11-01T05:30:00+00:00",
        "2026-11-01T06:30:00+00:00",
    ]
