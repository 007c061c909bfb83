"""Schedule paths the other tests do not take, each end to end on the dev server: a start
input that does not validate, when `DurabilityNextTickAt` is refreshed, pause and unpause
inside the workflow, an outcome that times out, `activity_task_queue`, a bad `cancel`
signal, `trigger` while paused and refused without a live schedule, and a run that goes on
after its schedule was terminated."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from tests.schedule.test_schedule_workflow import (
    _no_runs_left,
    cancel_and_drain,
    every_second,
    live_schedule,
    runs_of,
    set_schedule,
    start_schedule,
)
from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, schedule_worker
from workflows import search_attributes

pytestmark = pytest.mark.cacheless

# Far from any test's clock: a schedule that never ticks while the test runs.
YEARLY = "0 0 1 1 *"


def now_ms() -> int:
    return int(time.time() * 1000)


def first_tick_after(moment_ms: int, step_ms: int = 1000) -> int:
    """The first tick of `@every <step>` strictly after `moment_ms` (ticks at multiples)."""
    return (moment_ms // step_ms + 1) * step_ms


async def event_kinds(client: Client, workflow_id: str) -> list[EventType.ValueType]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [event.event_type for event in history.events]


async def test_an_invalid_start_input_fails_the_schedule_once_naming_the_field(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    async with schedule_worker(client, task_queue, recorder.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {
                "max_concurrent_runs": 0,
                "outcome_retries": {"max_attempts": 0},
                "overlap": "sometimes",
            },
            id=f"schedule:{unique}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), timeout=20)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert (cause.type, cause.non_retryable) == ("InvalidStartInput", True)
    for named in ("max_concurrent_runs", "max_attempts", "overlap", "sometimes"):
        assert named in cause.message, (named, cause.message)
    kinds = await event_kinds(client, handle.id)
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds  # failed once, not retried
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED


async def next_tick_at(handle: WorkflowHandle[Any, Any]) -> int | None:
    """The published `DurabilityNextTickAt`, in epoch ms."""
    described = await handle.describe()
    value = described.typed_search_attributes.get(search_attributes.NEXT_TICK_AT)
    return None if value is None else int(value.timestamp() * 1000)


async def test_next_tick_at_is_refreshed_when_the_tick_moves_earlier_or_over_a_minute_later(
    client: Client, task_queue: str, unique: str
) -> None:
    """docs/schedules.md: `DurabilityNextTickAt` is never later than the real next tick and at
    most a minute earlier; it is not upserted on every tick."""
    recorder = ScheduleFake()
    schedule = {"expression": YEARLY, "version": 1}
    async with live_schedule(client, task_queue, unique, recorder, schedule) as handle:
        new_year = (await handle.query("get"))["next_at"]
        await eventually(lambda: _published(handle, new_year))

        # Earlier: refreshed at once.
        assert await set_schedule(handle, expression="@every 1s", version=2)
        every_second = (await handle.query("get"))["next_at"]
        assert every_second < new_year
        await eventually(lambda: _published(handle, every_second))

        # Later by a second per tick: left alone (never later than the real next tick).
        await eventually(lambda: len(recorder.started) >= 3, timeout=20)
        real = (await handle.query("get"))["next_at"]
        assert real >= every_second + 3000
        assert await next_tick_at(handle) == every_second

        # Later by more than a minute: refreshed.
        assert await set_schedule(handle, expression=YEARLY, version=3)
        await eventually(lambda: _published(handle, new_year))

        # Nothing to tick: unset.
        await handle.execute_update("cancel", {})
        await eventually(lambda: _published(handle, None))
        await eventually(_no_runs_left(handle), timeout=20)


async def _published(handle: WorkflowHandle[Any, Any], expected: int | None) -> bool:
    return await next_tick_at(handle) == expected


async def test_pause_stops_ticks_and_unpause_skips_the_ticks_missed_while_paused(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    async with live_schedule(client, task_queue, unique, recorder, every_second()) as handle:
        await eventually(lambda: recorder.started, timeout=20)
        assert await handle.query("paused") is False
        assert await handle.execute_update("pause", {}, result_type=bool) is True
        assert await handle.execute_update("pause", {}, result_type=bool) is False
        assert await handle.query("paused") is True
        kept = (await handle.query("get"))["next_at"]  # `get` keeps the next tick

        # Paused while two more ticks come due.
        await eventually(lambda: now_ms() > kept + 2000, timeout=10, interval=0.05)
        assert (await handle.query("get"))["next_at"] == kept
        assert not [r for r in recorder.started if r["scheduled_time"] >= kept]

        before = now_ms()
        assert await handle.execute_update("unpause", {}, result_type=bool) is True
        after = now_ms()
        assert await handle.execute_update("unpause", {}, result_type=bool) is False
        assert await handle.query("paused") is False
        upcoming = (await handle.query("get"))["next_at"]
        # Recomputed from the unpause, not the tick kept from before the pause.
        assert first_tick_after(before) <= upcoming <= first_tick_after(after)
        assert upcoming >= kept + 3000

        await eventually(
            lambda: any(r["scheduled_time"] >= kept for r in recorder.started), timeout=20
        )
        await cancel_and_drain(handle, timeout=20)
    resumed = sorted(r["scheduled_time"] for r in recorder.started if r["scheduled_time"] >= kept)
    assert resumed[0] == upcoming  # the missed ticks were skipped, not collapsed into a run
    due = {e["scheduled_time"] for e in recorder.events if e["type"] in ("due", "skipped")}
    assert not {t for t in due if kept <= t < upcoming}


async def test_an_outcome_slower_than_its_timeout_is_dead_lettered_as_an_outcome_timeout(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()  # `gated_outcome`: the outcome activity never returns here
    schedule = {"expression": YEARLY, "version": 1, "params": {"gated_outcome": True}}
    outcomes = {
        "outcome_timeout_ms": 300,
        "outcome_retries": {"max_attempts": 2, "initial_interval_ms": 100},
    }
    async with live_schedule(client, task_queue, unique, recorder, schedule, **outcomes) as handle:
        scheduled_time = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(
            lambda: [e for e in recorder.events if e["type"] == "dead_lettered"], timeout=20
        )
        run = client.get_workflow_handle(f"schedule-run:{unique}:{scheduled_time}")
        result = await asyncio.wait_for(run.result(), timeout=20)
        await eventually(_no_runs_left(handle), timeout=20)
        [letter] = await handle.query("dead_letters")
        await handle.terminate("test done")
    timeout = {
        "name": "ScheduledOutcomeTimeoutError",
        "message": "activity timed out (START_TO_CLOSE)",
    }
    # The run ended as it stopped; the schedule delivered, and dead-lettered, its outcome.
    assert result == {
        "outcome": {"status": "complete", "error": None},
        "delivered": None,  # the schedule's to deliver: not the run's to claim
        "dead_letter_error": None,
        "outcome_pending": True,
    }
    assert letter["error"] == timeout
    [dead] = [e for e in recorder.events if e["type"] == "dead_lettered"]
    assert (dead["scheduled_time"], dead["attempt"], dead["error"]) == (scheduled_time, 2, timeout)
    assert [a for run_, _, a in recorder.outcomes if run_["scheduled_time"] == scheduled_time] == [
        1,
        2,
    ]
    assert recorder.accepted == []


async def test_activity_task_queue_sends_every_activity_of_a_schedule_to_that_queue(
    client: Client, task_queue: str, unique: str
) -> None:
    """The workflows' worker has no activities; a second worker serves only the activity
    queue named in the start input (e.g. activities written in another SDK)."""
    recorder = ScheduleFake()
    activity_queue = f"{task_queue}-activities"
    async with (
        schedule_worker(client, task_queue),
        Worker(client, task_queue=activity_queue, activities=recorder.activities()),
    ):
        handle = await start_schedule(
            client, task_queue, unique, activity_task_queue=activity_queue
        )
        await set_schedule(handle, expression=YEARLY, version=1)
        scheduled_time = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(_no_runs_left(handle), timeout=20)
        key = f"{unique}:{scheduled_time}"
        await eventually(
            lambda: (
                {"due", "started", "settled"}
                <= {e["type"] for e in recorder.events if e["id"] == key}
            ),
            timeout=10,
        )
        await handle.terminate("test done")
    assert [r["scheduled_time"] for r in recorder.started] == [scheduled_time]
    assert recorder.accepted == [scheduled_time]
    queues = set()
    for workflow_id in (handle.id, f"schedule-run:{key}"):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        queues |= {
            e.activity_task_scheduled_event_attributes.task_queue.name
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        }
    assert queues == {activity_queue}


async def test_a_bad_cancel_signal_is_dropped_and_counted_and_the_schedule_stays_live(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = {"expression": YEARLY, "version": 3}
    async with live_schedule(client, task_queue, unique, recorder, schedule) as handle:
        await handle.signal("cancel", {"version": "3"})
        await handle.signal("cancel", {"versoin": 3})
        await handle.signal("cancel", "now")
        await eventually(lambda: _dropped(handle, 3), timeout=20)
        assert (await handle.query("get"))["version"] == 3
        await handle.signal("cancel", {"version": 3})
        await eventually(lambda: _cancelled(handle), timeout=20)
        assert await handle.query("dropped_signals") == 3
        await handle.terminate("test done")


async def _dropped(handle: WorkflowHandle[Any, Any], count: int) -> bool:
    return bool(await handle.query("dropped_signals") == count)


async def _cancelled(handle: WorkflowHandle[Any, Any]) -> bool:
    return await handle.query("get") is None


async def test_trigger_runs_while_paused_and_is_refused_before_anything_is_recorded(
    client: Client, task_queue: str, unique: str
) -> None:
    """The trigger validator: with no live schedule (never set, or cancelled) a trigger is
    refused and leaves no trace in the history; while paused it runs (docs/schedules.md)."""
    recorder = ScheduleFake()
    async with live_schedule(client, task_queue, unique, recorder) as handle:
        refused: list[pytest.ExceptionInfo[WorkflowUpdateFailedError]] = []
        with pytest.raises(WorkflowUpdateFailedError) as never_set:
            await handle.execute_update("trigger", {})
        refused.append(never_set)
        await set_schedule(handle, expression=YEARLY, version=1, params={"p": 1})
        await handle.execute_update("pause", {})
        triggered = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(_no_runs_left(handle), timeout=20)
        await handle.execute_update("cancel", {})
        with pytest.raises(WorkflowUpdateFailedError) as cancelled:
            await handle.execute_update("trigger", {})
        refused.append(cancelled)
        history = await handle.fetch_history()
        await handle.terminate("test done")
    for rejected in refused:
        cause = rejected.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.non_retryable) == ("NoLiveSchedule", True)
    assert [(r["scheduled_time"], r["params"]) for r in recorder.started] == [(triggered, {"p": 1})]
    accepted = [
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]
    assert accepted == ["set", "pause", "trigger", "cancel"]  # no trace of the refused ones


async def test_a_run_whose_schedule_was_terminated_ends_as_it_stops(
    client: Client, task_queue: str, unique: str
) -> None:
    """A run still running when its schedule is terminated goes on and ends as it stops. Its
    outcome is the schedule's to deliver, and the schedule is gone: it is not delivered
    (docs/contract.md 6.3; `durability schedule close` is the clean way to end a schedule).
    Before 0.1.1 the run delivered it itself."""
    recorder = ScheduleFake()
    schedule = every_second(gated_run=True)
    async with live_schedule(
        client, task_queue, unique, recorder, schedule, max_concurrent_runs=1
    ) as handle:
        await eventually(lambda: recorder.started, timeout=20)
        first = recorder.started[0]["scheduled_time"]
        run_id = f"schedule-run:{unique}:{first}"

        async def queued() -> bool:
            return any(r["state"] == "queued" for r in await runs_of(handle))

        await eventually(queued, timeout=20)
        await handle.terminate("gone")
        recorder.run_gate.set()
        result = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), timeout=20)
    assert result == {
        "outcome": {"status": "complete", "error": None},
        "delivered": None,  # the schedule's to deliver: not the run's to claim
        "dead_letter_error": None,
        "outcome_pending": True,
    }
    assert first in recorder.finished and recorder.accepted == []
