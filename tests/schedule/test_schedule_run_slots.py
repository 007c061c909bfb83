"""A run's slot frees the moment the run stops (S8, S9): its `ScheduledRun` child ends then and
the schedule delivers the outcome (S11), so a dead outcome receiver no longer fills the slots,
and deliveries going at continue-as-new are carried to the next run (S13)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowHandle,
)

from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, record_history, schedule_worker
from tests.support.schedule import (
    every_second,
    live_schedule,
    runs_of,
)

pytestmark = pytest.mark.cacheless

YEARLY = "0 0 1 1 *"
# A receiver that is down: every attempt raises, up to 100 attempts a minute apart.
DEAD_RECEIVER = {
    "max_attempts": 100,
    "initial_interval_ms": 60_000,
    "maximum_interval_ms": 60_000,
}


async def _start(
    client: Client, task_queue: str, object_id: str, **options: Any
) -> WorkflowHandle[Any, Any]:
    handle = await client.start_workflow(
        "DurabilitySchedule", options, id=f"schedule:{object_id}", task_queue=task_queue
    )
    await handle.execute_update("set", {"expression": YEARLY, "version": 1})
    return handle


async def _states(handle: WorkflowHandle[Any, Any]) -> dict[int, str]:
    return {run["scheduled_time"]: run["state"] for run in await handle.query("runs")}


def _names(history: Any) -> list[str]:
    return [EventType.Name(e.event_type).removeprefix("EVENT_TYPE_") for e in history.events]


async def test_a_dead_outcome_receiver_does_not_hold_the_only_slot(
    client: Client, task_queue: str, unique: str
) -> None:
    """One slot and a receiver that is down: the next run starts as soon as the previous run
    stopped, which shows `complete` until its outcome is acknowledged; no signal was needed."""
    receiver = ScheduleFake(refusing=True)
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await _start(
            client, task_queue, f"dead-one-{unique}", max_concurrent_runs=1,
            outcome_retries=DEAD_RECEIVER,
        )  # fmt: skip
        first: int = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(lambda: receiver.refused, timeout=20)
        assert (await _states(handle)) == {first: "complete"}
        second: int = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(lambda: second in receiver.finished, timeout=20)

        async def both_complete() -> bool:
            return await _states(handle) == {first: "complete", second: "complete"}

        await eventually(both_complete, timeout=20)
        history = await handle.fetch_history()
        await handle.terminate("test done")
    # The parent learnt each run's end from its child's completion, not from a signal.
    signals = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert "durability.run_settled" not in signals, signals
    assert _names(history).count("CHILD_WORKFLOW_EXECUTION_COMPLETED") == 2


async def test_a_run_that_did_not_take_the_last_slot_frees_it_when_it_stops(
    client: Client, task_queue: str, unique: str
) -> None:
    """Two slots: a run that took the first one and whose outcome cannot be delivered frees it
    as it stops, so two more runs run side by side (before, it held the slot through its
    delivery and showed `running`)."""
    receiver = ScheduleFake(refusing=True)
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await _start(
            client, task_queue, f"dead-two-{unique}", max_concurrent_runs=2,
            outcome_retries=DEAD_RECEIVER,
        )  # fmt: skip
        first: int = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(lambda: receiver.refused, timeout=20)
        assert (await _states(handle)) == {first: "complete"}
        await handle.execute_update(
            "set", {"expression": YEARLY, "version": 2, "params": {"gated_run": True}}
        )
        second: int = await handle.execute_update("trigger", {}, result_type=int)
        third: int = await handle.execute_update("trigger", {}, result_type=int)
        running = {second, third}

        async def side_by_side() -> bool:
            started = {run["scheduled_time"] for run in receiver.started}
            return running <= started and receiver.in_flight == 2

        await eventually(side_by_side, timeout=20)
        states = await _states(handle)
        assert states == {first: "complete", second: "running", third: "running"}, states
        receiver.run_gate.set()
        await handle.terminate("test done")


async def test_deliveries_going_at_continue_as_new_are_delivered_by_the_next_run(
    client: Client, task_queue: str, unique: str
) -> None:
    """Outcomes whose delivery is in its retry backoff when the schedule continues as new are
    cancelled, carried and delivered by the next run: each exactly once here (the attempt that
    delivers is never cut short), none lost, and the dead-letter path is not taken."""
    receiver = ScheduleFake(refusing=True)
    retries = {"max_attempts": 50, "initial_interval_ms": 500, "maximum_interval_ms": 500}
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await _start(
            client, task_queue, f"carried-{unique}", max_concurrent_runs=3,
            outcome_retries=retries, continue_as_new_after_events=60,
        )  # fmt: skip
        first_run = (await handle.describe()).run_id
        triggered = [await handle.execute_update("trigger", {}, result_type=int) for _ in range(3)]

        async def all_stopped() -> bool:
            states = await _states(handle)
            return set(states) == set(triggered) and set(states.values()) == {"complete"}

        await eventually(all_stopped, timeout=30)
        while (await handle.describe()).run_id == first_run:
            await handle.execute_update("pause", {})  # history events, up to continue-as-new
        # Carried: still awaiting acknowledgement in the next run, shown as stopped.
        assert set((await _states(handle)).values()) == {"complete"}
        receiver.refusing = False

        async def acknowledged() -> bool:
            return not await handle.query("runs")

        await eventually(acknowledged, timeout=30)
        assert await handle.query("dead_letters") == []
        first = await client.get_workflow_handle(handle.id, run_id=first_run).fetch_history()
        current = await handle.fetch_history()
        record_history("schedule_parent_0_1_1_delivers_outcomes", first)
        record_history("schedule_parent_0_1_1_delivers_carried_outcomes", current)
        run_history = await client.get_workflow_handle(
            f"schedule-run:carried-{unique}:{triggered[0]}"
        ).fetch_history()
        record_history("schedule_run_0_1_1_ends_when_run_stops", run_history)
        await handle.terminate("test done")
    assert sorted(receiver.accepted) == sorted(triggered), receiver.accepted
    names = _names(first)
    assert names[-1] == "WORKFLOW_EXECUTION_CONTINUED_AS_NEW"
    assert "ACTIVITY_TASK_CANCEL_REQUESTED" in names, names
    # The run ended as soon as it stopped: no outcome activity in its history.
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in run_history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled == ["run"], scheduled
    result = run_history.events[-1].workflow_execution_completed_event_attributes.result
    assert json.loads(result.payloads[0].data)["outcome_pending"] is True


async def test_a_dead_lettered_outcome_delivered_by_the_schedule_can_be_redelivered(
    client: Client, task_queue: str, unique: str
) -> None:
    """The schedule's own delivery dead-letters as the run's did (`dead_lettered` event, the
    letter kept, the run forgotten), and `redeliver` delivers it with its original key."""
    receiver = ScheduleFake(refusing=True)
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await _start(
            client, task_queue, f"lettered-{unique}", lifecycle_activity="lifecycle",
            outcome_retries={"max_attempts": 2, "initial_interval_ms": 50},
        )  # fmt: skip
        scheduled: int = await handle.execute_update("trigger", {}, result_type=int)

        async def lettered() -> list[dict[str, Any]]:
            if await handle.query("runs"):
                return []
            letters: list[dict[str, Any]] = await handle.query("dead_letters")
            return letters

        (letter,) = await eventually(lettered, timeout=30)
        assert letter["scheduled_time"] == scheduled
        assert letter["error"] == {"name": "Unavailable", "message": "receiver down"}
        assert receiver.refused.count(letter["idempotency_key"]) == 2
        await eventually(
            lambda: [e for e in receiver.events if e["type"] == "dead_lettered"], timeout=10
        )
        (event,) = [e for e in receiver.events if e["type"] == "dead_lettered"]
        assert (event["id"], event["attempt"]) == (letter["idempotency_key"], 2)
        receiver.refusing = False
        await handle.execute_update("redeliver", {"idempotency_key": letter["idempotency_key"]})

        async def redelivered() -> bool:
            return not await handle.query("dead_letters")

        await eventually(redelivered, timeout=30)
        assert receiver.accepted_keys == [letter["idempotency_key"]]
        await handle.terminate("test done")


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
