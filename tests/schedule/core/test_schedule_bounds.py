"""The bounds on a schedule's life in the pure core (hypothesis): `catchup_window_ms`,
`start_at` / `end_at`, `remaining_runs`, `pause_on_failure` and the pause note."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflows.schedule.core import (
    InvalidRequest,
    ScheduleCore,
    Skipped,
    failure_note,
    initial_state,
    parse_configure,
    read_start,
)
from workflows.schedule.messages import read_payload
from workflows.schedule.models import (
    MAX_LIFE_BOUND_MS,
    MAX_PAUSE_NOTE_LENGTH,
    MAX_SAFE_INTEGER,
    Outcome,
    Run,
    RunError,
    ScheduleInput,
    ScheduleState,
    ScheduleWorkflowInput,
    SetRequest,
    SkipReason,
)
from workflows.schedule.status import details
from workflows.validation import CARRIED_CONTEXT


def every(expression: str, after_ms: int) -> int | None:
    """`every:<step>` fires at whole multiples of step."""
    step = int(expression.removeprefix("every:"))
    return (after_ms // step + 1) * step


def bounded_core(**bounds: Any) -> ScheduleCore:
    """A fresh schedule's core (as the workflow creates it) with these start settings."""
    schedule_settings = ScheduleInput.model_validate(
        {"object_id": "acct", "max_concurrent_runs": 1000, "max_queued_runs": 1000, **bounds}
    )
    return ScheduleCore(initial_state(schedule_settings), every, schedule_settings)


def set_every(core: ScheduleCore, step: int, now: int, jitter_ms: int = 0) -> None:
    request = SetRequest(expression=f"every:{step}", version=1, jitter_ms=jitter_ms)
    assert core.set(request, now, lambda _: 0)


def errored(name: str = "BoomError", message: str = "boom") -> Outcome:
    return Outcome(status="errored", error=RunError(name=name, message=message))


# Clock steps: mostly small, sometimes an outage many ticks long.
STEPS = st.lists(st.integers(1, 400) | st.integers(1_000, 20_000), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(
    step=st.sampled_from([100, 250, 1000]),
    start=st.none() | st.integers(0, 8_000),
    length=st.none() | st.integers(1, 10_000),
    jitter=st.integers(0, 300),
    clock=STEPS,
)
def test_no_tick_records_a_run_outside_start_at_and_end_at(
    step: int, start: int | None, length: int | None, jitter: int, clock: list[int]
) -> None:
    end = None if length is None else (start or 0) + length
    core = bounded_core(start_at=start, end_at=end)
    now = 0
    set_every(core, step, now, jitter)
    recorded: list[int] = []
    for advance in clock:
        now += advance
        for _ in range(3):
            due = core.tick(now)
            if isinstance(due, Run):
                recorded.append(due.scheduled_time)
            view = core.get()
            assert view is not None
            next_at = view["next_at"]
            assert next_at is None or (start or 0) <= next_at < (end or MAX_SAFE_INTEGER + 1)
    assert all((start or 0) <= t < (end or MAX_SAFE_INTEGER + 1) for t in recorded)
    if end is not None and now >= end + jitter:
        # Past the end nothing is scheduled: `get` and the published next tick say so.
        assert core.get() is not None and core.get()["next_at"] is None  # type: ignore[index]
        assert core.next_wake_at() is None


@settings(max_examples=300, deadline=None)
@given(
    remaining=st.integers(0, 12),
    clock=STEPS,
    queue=st.integers(0, 3),
    window=st.none() | st.integers(1, 500),
)
def test_ticks_record_at_most_remaining_runs_and_only_recorded_runs_count_down(
    remaining: int, clock: list[int], queue: int, window: int | None
) -> None:
    schedule_settings = ScheduleInput.model_validate(
        {
            "object_id": "acct",
            "max_concurrent_runs": 1,
            "max_queued_runs": queue,
            "remaining_runs": remaining,
            "catchup_window_ms": window,
        }
    )
    core = ScheduleCore(initial_state(schedule_settings), every, schedule_settings)
    now = 0
    set_every(core, 100, now)
    recorded = skipped = 0
    for advance in clock:
        now += advance
        due = core.tick(now)
        if isinstance(due, Run):
            recorded += 1
        elif isinstance(due, Skipped):
            skipped += 1
        skipped += core.caught_up is not None
        # Runs end now and then, so some ticks find room and some do not.
        if advance % 3 == 0:
            for run in core.take_startable():
                core.acknowledged(run.scheduled_time, "k", Outcome(status="complete"))
        assert core.state.remaining_runs == remaining - recorded
    assert recorded <= remaining
    assert core.state.skipped_ticks == skipped
    if core.state.remaining_runs == 0:
        view = core.get()
        assert view is not None and view["next_at"] is None
        assert core.tick(now + 10**6) is None


@settings(max_examples=500, deadline=None)
@given(
    window=st.integers(1, 5_000),
    jitter=st.integers(0, 1_000),
    late=st.integers(0, 10_000),
)
def test_a_tick_is_skipped_for_the_catchup_window_iff_it_fires_more_than_the_window_late(
    window: int, jitter: int, late: int
) -> None:
    core = bounded_core(catchup_window_ms=window)
    set_every(core, 100_000, 0, jitter)
    due_at = 100_000 + jitter
    due = core.tick(due_at + late)
    if late > window:
        assert isinstance(due, Skipped) and due.reason == SkipReason.CATCHUP_WINDOW
        assert core.state.skipped_ticks == 1 and not core.state.runs
    else:
        assert isinstance(due, Run) and due.scheduled_time == 100_000
        assert core.state.skipped_ticks == 0
    # Either way next_at moved past now: the missed ticks collapsed into that one decision.
    view = core.get()
    assert view is not None and view["next_at"] > due_at + late - jitter


def test_a_daily_schedule_missed_for_three_days_skips_the_stale_ticks_and_runs_todays() -> None:
    day = 86_400_000
    core = bounded_core(catchup_window_ms=3_600_000)
    set_every(core, day, 0)
    # Back a minute after the third missed tick: the two stale ones are one skip, and the
    # third, inside the window, runs for them.
    due = core.tick(3 * day + 60_000)
    assert isinstance(due, Run) and due.scheduled_time == 3 * day
    stale = core.caught_up
    assert stale is not None and stale.reason == SkipReason.CATCHUP_WINDOW
    assert stale.scheduled_time == day
    assert core.state.skipped_ticks == 1
    assert core.get()["next_at"] == 4 * day  # type: ignore[index]


def test_a_daily_schedule_back_after_the_window_skips_every_missed_tick_once() -> None:
    day = 86_400_000
    core = bounded_core(catchup_window_ms=3_600_000)
    set_every(core, day, 0)
    due = core.tick(3 * day + 2 * 3_600_000)
    assert isinstance(due, Skipped) and due.reason == SkipReason.CATCHUP_WINDOW
    assert due.scheduled_time == day and core.caught_up is None
    assert core.state.skipped_ticks == 1 and not core.state.runs
    assert core.get()["next_at"] == 4 * day  # type: ignore[index]
    # The next day's tick, on time, runs.
    assert isinstance(core.tick(4 * day + 1_000), Run)


@settings(max_examples=500, deadline=None)
@given(
    step=st.sampled_from([100, 250, 1000]),
    window=st.integers(1, 5_000),
    jitter=st.integers(0, 99),
    outage=st.integers(1, 20_000),
)
def test_after_an_outage_the_earliest_occurrence_inside_the_window_runs(
    step: int, window: int, jitter: int, outage: int
) -> None:
    core = bounded_core(catchup_window_ms=window)
    set_every(core, step, 0, jitter)
    now = step + jitter + outage
    due = core.tick(now)
    missed = [t for t in range(step, now + 1, step) if t + jitter <= now]
    inside = [t for t in missed if now - (t + jitter) <= window]
    if inside and inside[0] == missed[0]:
        # The first missed occurrence is inside the window: no skip, it runs (S6).
        assert isinstance(due, Run) and due.scheduled_time == missed[0]
        assert core.caught_up is None and core.state.skipped_ticks == 0
    elif inside:
        assert isinstance(due, Run) and due.scheduled_time == inside[0]
        assert core.caught_up is not None and core.caught_up.scheduled_time == missed[0]
        assert core.state.skipped_ticks == 1
    else:
        assert isinstance(due, Skipped) and due.scheduled_time == missed[0]
        assert core.caught_up is None and not core.state.runs
    assert len(core.state.runs) <= 1
    view = core.get()
    assert view is not None and view["next_at"] + jitter > now


def test_without_a_window_a_late_tick_still_collapses_into_one_run() -> None:
    core = bounded_core()
    set_every(core, 1_000, 0)
    due = core.tick(10_500)
    assert isinstance(due, Run) and due.scheduled_time == 1_000
    assert core.get()["next_at"] == 11_000  # type: ignore[index]


def test_trigger_and_backfill_are_not_subject_to_the_window_nor_counted() -> None:
    core = bounded_core(catchup_window_ms=1, remaining_runs=1, start_at=2_000, end_at=6_000)
    set_every(core, 1_000, 0)
    # backfill records only the occurrences within [start_at, end_at).
    assert [r.scheduled_time for r in core.backfill(0, 9_000)] == [2_000, 3_000, 4_000, 5_000]
    assert core.state.remaining_runs == 1
    # trigger is not bounded: after end_at, with the count spent, it still records a run.
    core.set_remaining_runs(0, 10_000)
    assert core.trigger(10_000).scheduled_time == 10_000
    assert core.state.remaining_runs == 0


def test_five_runs_then_no_more_ticks() -> None:
    core = bounded_core(remaining_runs=5)
    set_every(core, 1_000, 0)
    times = []
    for now in range(1_000, 20_000, 1_000):
        due = core.tick(now)
        if isinstance(due, Run):
            times.append(due.scheduled_time)
    assert times == [1_000, 2_000, 3_000, 4_000, 5_000]
    assert core.get()["next_at"] is None  # type: ignore[index]
    assert core.next_wake_at() is None
    # A new version does not start ticking again, nor does unpause.
    assert core.set(SetRequest(expression="every:500", version=2), 20_000, lambda _: 0)
    assert core.get()["next_at"] is None  # type: ignore[index]
    core.pause()
    core.unpause(21_000)
    assert core.next_wake_at() is None


def test_set_remaining_runs_stops_or_resumes_ticking() -> None:
    core = bounded_core(remaining_runs=1)
    set_every(core, 1_000, 0)
    assert isinstance(core.tick(1_000), Run)
    assert core.get()["next_at"] is None  # type: ignore[index]
    core.set_remaining_runs(2, 1_500)
    assert core.get()["next_at"] == 2_000  # type: ignore[index]
    core.set_remaining_runs(0, 1_600)
    assert core.get()["next_at"] is None  # type: ignore[index]
    core.set_remaining_runs(None, 2_500)
    assert core.get()["next_at"] == 3_000  # type: ignore[index]
    assert core.state.remaining_runs is None


def test_remaining_runs_is_carried_state_read_from_the_start_field_only_at_creation() -> None:
    start = read_start(lambda: {"remaining_runs": 5}, "schedule:acct")
    assert start.carried is None and initial_state(start.settings).remaining_runs == 5
    # After continue-as-new the start field is passed again; the carried count wins.
    carried = {"remaining_runs": 5, "carried": {"remaining_runs": 2}}
    again = read_start(lambda: carried, "schedule:acct")
    assert again.carried is not None and again.carried.remaining_runs == 2
    # State carried by the previous build (no such field) loads, with no limit.
    old = ScheduleWorkflowInput.model_validate({"carried": {"paused": True, "skipped_ticks": 3}})
    assert old.carried is not None
    assert old.carried.remaining_runs is None and old.carried.pause_note is None


def test_an_errored_run_pauses_the_schedule_with_a_note_naming_it_and_unpause_clears_it() -> None:
    core = bounded_core(pause_on_failure=True)
    set_every(core, 1_000, 0)
    run = core.tick(1_000)
    assert isinstance(run, Run)
    core.take_startable()
    assert core.finished_to_deliver(
        1_000, errored("BoomError", "the bank said no")
    )  # the loop must wake
    assert core.state.paused
    assert core.state.pause_note == (
        "paused on failure: run acct:1000 errored: BoomError: the bank said no"
    )
    assert core.tick(5_000) is None and core.next_wake_at() is None
    assert core.unpause(5_500)
    assert core.state.pause_note is None and core.next_wake_at() == 6_000


@pytest.mark.parametrize("path", ["finish", "acknowledged", "finished_to_deliver"])
def test_every_way_a_run_reports_an_error_pauses_and_a_complete_one_does_not(path: str) -> None:
    for outcome, pauses in ((Outcome(status="complete"), False), (errored(), True)):
        core = bounded_core(pause_on_failure=True)
        set_every(core, 1_000, 0)
        core.tick(1_000)
        core.take_startable()
        if path == "finish":
            core.finish(1_000, outcome)
        elif path == "acknowledged":
            assert core.acknowledged(1_000, "acct:1000", outcome) is pauses
        else:
            assert core.finished_to_deliver(1_000, outcome) is pauses
        assert core.state.paused is pauses


def test_without_pause_on_failure_an_error_does_not_pause() -> None:
    core = bounded_core()
    set_every(core, 1_000, 0)
    core.tick(1_000)
    core.take_startable()
    assert not core.finished_to_deliver(1_000, errored())
    assert not core.state.paused and core.state.pause_note is None


def test_a_failure_while_paused_keeps_the_pause_and_its_note() -> None:
    core = bounded_core(pause_on_failure=True)
    set_every(core, 1_000, 0)
    core.tick(1_000)
    core.take_startable()
    assert core.pause("maintenance until 14:00")
    core.finished_to_deliver(1_000, errored())
    assert core.state.pause_note == "maintenance until 14:00"


def test_the_failure_note_is_bounded() -> None:
    note = failure_note("k" * 900, RunError(name="E" * 5_000, message="m" * 100_000))
    assert len(note) <= MAX_PAUSE_NOTE_LENGTH and note.endswith("...")
    assert "k" * 900 in note


def test_pause_takes_an_optional_note_replacing_the_one_of_a_paused_schedule() -> None:
    core = bounded_core()
    set_every(core, 1_000, 0)
    assert core.pause(None) and core.state.pause_note is None
    assert not core.pause("deploying")  # already paused: the note is replaced
    assert core.state.pause_note == "deploying"
    assert not core.pause()  # no note given: the note stays
    assert core.state.pause_note == "deploying"
    assert core.unpause(0) and core.state.pause_note is None


@pytest.mark.parametrize(
    ("payload", "note"),
    [(None, None), ({}, None), ({"note": "why"}, "why"), ({"note": None}, None), ("x", None)],
)
def test_a_pause_payload_reads_the_note(payload: object, note: str | None) -> None:
    assert read_payload("pause", payload).note == note


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"note": 5}, "note: Input should be a valid string (got 5)"),
        ({"note": ["a"]}, "note: Input should be a valid string (got ['a'])"),
        ({"note": "x" * 1201}, "note: String should have at most 1200 characters (got 'xxx"),
    ],
)
def test_a_bad_pause_note_is_refused_naming_the_field_and_value(
    payload: object, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        read_payload("pause", payload)
    assert str(refused.value).startswith(f"invalid pause payload: {message}")


@pytest.mark.parametrize(
    ("start_input", "named"),
    [
        ({"catchup_window_ms": 0}, "catchup_window_ms: Input should be greater than or equal to 1"),
        ({"catchup_window_ms": 2**31}, "catchup_window_ms: Input should be less than or equal"),
        ({"start_at": -1}, "start_at: Input should be greater than or equal to 0 (got -1)"),
        ({"end_at": 2**53}, f"end_at: Input should be less than or equal to {MAX_LIFE_BOUND_MS}"),
        # Past 2100: a timer Temporal cannot set, a date Python cannot show.
        (
            {"start_at": MAX_LIFE_BOUND_MS + 1},
            f"start_at: Input should be less than or equal to {MAX_LIFE_BOUND_MS}",
        ),
        ({"start_at": 10, "end_at": 10}, "end_at must be after start_at, got end_at=10 <="),
        ({"remaining_runs": -1}, "remaining_runs: Input should be greater than or equal to 0"),
        ({"remaining_runs": 10**9 + 1}, "remaining_runs: Input should be less than or equal"),
        ({"pause_on_failure": "maybe"}, "pause_on_failure: Input should be a valid boolean"),
        ({"remaining_runs": None, "pause_on_failure": 3}, "pause_on_failure: Input should"),
    ],
)
def test_a_bad_bound_in_the_start_input_is_refused_naming_the_field_and_value(
    start_input: dict[str, Any], named: str
) -> None:
    start = read_start(lambda: start_input, "schedule:acct")
    assert start.error is not None and named in start.error
    if "(root)" not in start.error:
        assert f"(got {list(start_input.values())[-1]!r})" in start.error


@pytest.mark.parametrize("field", ["start_at", "end_at"])
def test_a_life_bound_an_earlier_build_accepted_is_kept_when_carried(field: str) -> None:
    """A schedule carrying a `start_at` / `end_at` past 2100 (accepted before that bound)
    continues as new with it; a new start and `configure` still refuse it."""
    far = MAX_SAFE_INTEGER - 1
    carried = read_start(lambda: {field: far, "carried": {"paused": True}}, "schedule:acct")
    assert carried.error is None and carried.coerced is None
    assert getattr(carried.settings, field) == far
    continued = ScheduleWorkflowInput.model_validate(
        {**carried.settings.model_dump(), "carried": carried.carried}, context=CARRIED_CONTEXT
    )
    assert getattr(continued, field) == far
    fresh = read_start(lambda: {field: far}, "schedule:acct")
    assert fresh.error is not None
    assert f"{field}: Input should be less than or equal to {MAX_LIFE_BOUND_MS}" in fresh.error
    with pytest.raises(InvalidRequest, match=field):
        parse_configure({field: far}, ScheduleInput())


@pytest.mark.parametrize(
    "start_input",
    [{"catchup_window_ms": "5"}, {"remaining_runs": 2.0}, {"pause_on_failure": 1}],
)
def test_a_bound_of_another_json_type_is_refused_by_the_strict_reading(
    start_input: dict[str, Any],
) -> None:
    start = read_start(lambda: start_input, "schedule:acct")
    assert start.error is None and start.coerced is not None
    assert next(iter(start_input)) in start.coerced


def test_the_defaults_keep_todays_behaviour_and_without_bounds_restores_it() -> None:
    assert not ScheduleInput().bounded()
    for bound in (
        {"catchup_window_ms": 1},
        {"start_at": 0},
        {"end_at": 5},
        {"remaining_runs": 0},
        {"pause_on_failure": True},
    ):
        assert ScheduleInput.model_validate(bound).bounded()
        assert not ScheduleInput.model_validate(bound).without_bounds().bounded()
    bounded = ScheduleInput.model_validate(
        {"catchup_window_ms": 1, "start_at": 5_000, "end_at": 6_000, "remaining_runs": 0}
    )
    unbounded = bounded.without_bounds()
    core = ScheduleCore(initial_state(unbounded), every, unbounded)
    set_every(core, 1_000, 0)
    assert isinstance(core.tick(9_500), Run)
    assert core.state.remaining_runs is None
    plain = ScheduleCore(ScheduleState(), every, ScheduleInput())
    set_every(plain, 1_000, 0)
    assert isinstance(plain.tick(9_500), Run)
    assert plain.state == core.state


def configured(core: ScheduleCore, now: int, **fields: Any) -> None:
    """`configure` as the shell applies it: the settings, then the bounds it set."""
    settings = parse_configure(fields, ScheduleInput(object_id="acct"))
    core.use_settings(settings)
    core.configure_bounds(settings, fields, now)


def test_configure_sets_the_remaining_count_and_moves_the_next_tick_into_new_bounds() -> None:
    core = bounded_core(remaining_runs=1)
    set_every(core, 1_000, 0)
    assert isinstance(core.tick(1_000), Run)
    assert core.next_wake_at() is None  # spent
    configured(core, 1_500, remaining_runs=2)
    assert core.state.remaining_runs == 2 and core.next_wake_at() == 2_000
    configured(core, 1_600, end_at=2_000)  # the next tick is at the end: none
    assert core.next_wake_at() is None
    configured(core, 1_700, end_at=10_000, start_at=5_000)
    assert core.next_wake_at() == 5_000
    configured(core, 1_800, start_at=3_000)  # within the new bounds: kept
    assert core.next_wake_at() == 5_000
    configured(core, 1_900, catchup_window_ms=10, pause_on_failure=True)
    assert core.catchup_window_ms == 10 and core.pause_on_failure
    assert core.next_wake_at() == 5_000  # untouched by what does not move ticks
    assert core.state.remaining_runs == 2  # a configure without the count keeps it


def test_configure_refuses_a_bad_bound_naming_it() -> None:
    with pytest.raises(InvalidRequest, match="remaining_runs: Input should be"):
        parse_configure({"remaining_runs": -1}, ScheduleInput(start_at=5))
    with pytest.raises(InvalidRequest, match="end_at must be after start_at"):
        parse_configure({"end_at": 5}, ScheduleInput(start_at=5))


def test_the_ui_details_show_the_pause_note() -> None:
    core = bounded_core()
    set_every(core, 1_000, 0)
    core.pause("waiting for new credentials")
    shown = details(core.state, core.next_wake_at())
    assert shown.startswith("**Paused.** waiting for new credentials  \n`every:1000`")
    core.unpause(0)
    core.pause()
    assert details(core.state, None).startswith("**Paused.** `every:1000`")
