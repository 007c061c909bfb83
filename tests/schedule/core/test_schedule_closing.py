"""The core's decisions about closing and about triggers (property-tested): which outcome
deliveries start, when a cancelled schedule may close, what a closing schedule refuses, and
the time each trigger records its run at."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workflows.schedule.core import Closing, ScheduleClosing, ScheduleCore
from workflows.schedule.models import Outcome, ScheduleInput, ScheduleState, SetRequest


def every(expression: str, after_ms: int) -> int | None:
    period = int(expression.removeprefix("every:"))
    return (after_ms // period + 1) * period


def core_with_owed(owed: int, max_concurrent_runs: int = 5) -> ScheduleCore:
    """A live schedule with `owed` runs stopped, their outcomes for it to deliver."""
    core = ScheduleCore(
        ScheduleState(), every, ScheduleInput(max_concurrent_runs=max_concurrent_runs)
    )
    core.set(SetRequest(expression="every:60000", version=1), 1_000, lambda top: 0)
    for index in range(owed):
        run = core.trigger(2_000 + index)
        core.take_startable(2_000 + index)
        core.finished_to_deliver(run.scheduled_time, Outcome(status="complete"), 3_000)
    return core


@given(
    owed=st.integers(0, 6),
    going=st.sets(st.integers(0, 5)),
    limit=st.integers(1, 4),
    closing=st.sampled_from([None, Closing.CONTINUE_AS_NEW, Closing.CANCELLED]),
)
def test_deliveries_start_oldest_first_within_the_limit_and_never_while_stopped(
    owed: int, going: set[int], limit: int, closing: Closing | None
) -> None:
    core = core_with_owed(owed)
    times = [run.scheduled_time for run in core.awaiting_delivery()]
    going_times = {times[i] for i in going if i < len(times)}
    core.closing = closing
    started = [run.scheduled_time for run in core.deliveries_to_start(going_times, limit)]
    if closing is Closing.CONTINUE_AS_NEW:
        assert started == [] and core.deliveries_stopped()
        return
    assert not set(started) & going_times
    assert len(started) <= max(limit - len(going_times), 0)
    assert started == sorted(started)
    waiting = [t for t in times if t not in going_times]
    assert started == waiting[: max(limit - len(going_times), 0)]


@given(owed=st.integers(1, 4))
def test_a_cancellation_lifts_the_stop_a_continue_as_new_close_set(owed: int) -> None:
    core = core_with_owed(owed)
    core.begin_continue_as_new()
    assert core.deliveries_to_start(set(), 10) == []
    core.begin_cancellation()
    assert not core.deliveries_stopped()
    assert len(core.deliveries_to_start(set(), 10)) == owed
    # Not closable while anything is owed, going, or busy elsewhere.
    assert not core.may_close_cancelled(deliveries_going=0, others_busy=False)
    for run in list(core.awaiting_delivery()):
        core.delivered(run.scheduled_time, "k", None)
    assert not core.may_close_cancelled(deliveries_going=1, others_busy=False)
    assert not core.may_close_cancelled(deliveries_going=0, others_busy=True)
    assert core.may_close_cancelled(deliveries_going=0, others_busy=False)


def test_a_continue_as_new_close_does_not_stop_what_a_cancellation_keeps_going() -> None:
    core = core_with_owed(1)
    core.begin_cancellation()
    core.begin_continue_as_new()
    assert core.closing is Closing.CANCELLED and not core.deliveries_stopped()


@given(name=st.sampled_from(["set", "cancel", "pause", "trigger", "configure", "redeliver"]))
def test_only_a_schedule_closing_as_cancelled_refuses_messages(name: str) -> None:
    core = core_with_owed(0)
    core.check_open(name)
    core.begin_continue_as_new()
    core.check_open(name)  # honoured: carried to the next run
    assert core.get() is not None and "closing" not in core.get()  # type: ignore[operator]
    core.begin_cancellation()
    with pytest.raises(ScheduleClosing, match=f"{name} refused: the schedule is closing"):
        core.check_open(name)
    assert core.get()["closing"] is True  # type: ignore[index]


@given(
    bursts=st.lists(st.tuples(st.integers(0, 3_000), st.integers(1, 5)), min_size=1, max_size=8),
    max_concurrent_runs=st.integers(1, 10),
)
def test_each_trigger_records_its_own_run_at_a_time_no_run_or_tick_holds(
    bursts: list[tuple[int, int]], max_concurrent_runs: int
) -> None:
    core = ScheduleCore(
        ScheduleState(),
        every,
        ScheduleInput(max_concurrent_runs=max_concurrent_runs, max_queued_runs=1000),
    )
    core.set(SetRequest(expression="every:1000", version=1), 0, lambda top: 0)
    answered: list[int] = []
    now = 0
    for advance, count in bursts:
        now += advance
        core.tick(now)
        for _ in range(count):
            held = set(core.state.runs)
            tick_at = core.state.schedule.next_at  # type: ignore[union-attr]
            run = core.trigger(now)
            assert run.scheduled_time >= now and run.scheduled_time not in held
            assert run.scheduled_time != tick_at
            answered.append(run.scheduled_time)
        for run in core.take_startable(now):
            core.finished_to_deliver(run.scheduled_time, Outcome(status="complete"), now)
            core.delivered(run.scheduled_time, "k", None)
    assert len(set(answered)) == len(answered)
