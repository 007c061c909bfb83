"""Updates sent while a workflow continues as new are never aborted (`workflows.kernel`).

Temporal fails a workflow task that continues as new while a new event arrived (a signal,
a child's end) and aborts every update that task delivered with a non-retryable
"unexpected workflow task failure". Each test floods a workflow that continues as new every
few events with updates (several at once) and signals, then checks that no update call
failed, that the workflow did wait for a task without updates at least once (the race the
test is about happened), that no task failed for any cause but Temporal's refusal of a raced
continue-as-new, and that every run that had a workflow task replays.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributeKey
from temporalio.worker import Worker

from durability.client import DurabilityClient, UnansweredError
from harness.replay import production_replayer
from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, record_history, replay_each
from tests.support.ledger import intent, live_ledger, operations, until_resolved_or_blocked
from tests.support.schedule import live_schedule, runs_of
from workflows.kernel import CLOSE_WITHOUT_UPDATE_PATCH
from workflows.ledger.request import FrozenRequestWorkflow
from workflows.ledger.workflow import OperationLedgerWorkflow
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

FLOOD_SECONDS = 10
SIGNAL_SENDERS = 3
# Between one caller's updates: a caller that never pauses keeps every task busy with an
# update (on a cacheless worker above all), and the workflows then close anyway after their
# bound of waits; the client's second attempt covers that (the last test).
UPDATE_PAUSE_S = 0.05
UPDATE_ANSWER_S = 30
REPLAY_S = 30
RACED_CLOSE = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND


async def flood(
    send_update: Callable[[int], Awaitable[Any]], send_signal: Callable[[], Awaitable[None]]
) -> list[str]:
    """Send updates (one caller) and signals (SIGNAL_SENDERS callers) for FLOOD_SECONDS;
    returns the error of every update call that failed or had no answer."""
    end = time.monotonic() + FLOOD_SECONDS
    numbers = itertools.count()
    errors: list[str] = []

    async def updates() -> None:
        while time.monotonic() < end:
            try:
                await asyncio.wait_for(send_update(next(numbers)), UPDATE_ANSWER_S)
            except Exception as error:
                errors.append(f"{type(error).__name__}: {error}")
            await asyncio.sleep(UPDATE_PAUSE_S)

    async def signals() -> None:
        while time.monotonic() < end:
            await send_signal()
            await asyncio.sleep(0.01)

    await asyncio.gather(updates(), *(signals() for _ in range(SIGNAL_SENDERS)))
    return errors


async def check_runs(
    client: Client, workflow_id: str, workflows: list[type], history_name: str
) -> None:
    """Several runs, one waited for a task without updates, no failed task but a raced
    continue-as-new, and every run that had a task replays. With DURABILITY_RECORD_HISTORIES=1
    the shortest run that waited is saved as `tests/histories/<history_name>.json` for the
    replay tests."""
    runs = [e.run_id async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    assert len(runs) >= 3, "the workflow continued as new during the flood"
    histories = [
        await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        for run_id in runs
    ]
    events = [event for history in histories for event in history.events]
    waited = sorted(
        (history for history in histories if any(map(waits, history.events))),
        key=lambda history: len(history.events),
    )
    assert waited, "some continue-as-new was due in a task that delivered an update"
    record_history(history_name, waited[0])
    causes = [
        e.workflow_task_failed_event_attributes.cause
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert set(causes) <= {RACED_CLOSE}, causes
    await replay_each(production_replayer(workflows), histories, REPLAY_S)


# The race is timing's: a round of flood may happen to deliver no update in the task where a
# continue-as-new is due. Flood again (up to this many rounds) until some run waited.
FLOOD_ROUNDS = 3


async def flood_until_a_run_waited(
    client: Client,
    workflow_id: str,
    send_update: Callable[[int], Awaitable[Any]],
    send_signal: Callable[[], Awaitable[None]],
) -> list[str]:
    """`flood` until some run of `workflow_id` waited for a task without updates, at most
    FLOOD_ROUNDS rounds; returns every round's update errors."""
    errors: list[str] = []
    for _ in range(FLOOD_ROUNDS):
        errors += await flood(send_update, send_signal)
        async for run in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
            history = await client.get_workflow_handle(
                workflow_id, run_id=run.run_id
            ).fetch_history()
            if any(map(waits, history.events)):
                return errors
    return errors


def waits(event: HistoryEvent) -> bool:
    """The patch marker a run records the first time it waits for a task without updates."""
    return event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and any(
        CLOSE_WITHOUT_UPDATE_PATCH.encode() in payload.data
        for payload in event.marker_recorded_event_attributes.details["patch-data"].payloads
    )


@pytest.mark.cacheless
async def test_updates_racing_a_schedules_continue_as_new_are_never_aborted(
    client: Client, task_queue: str, unique: str
) -> None:
    recorder = ScheduleFake()
    schedule = {"expression": "@every 1s", "version": 1, "params": {"sleep_ms": 3000}}
    async with live_schedule(
        client, task_queue, unique, recorder, schedule, continue_as_new_after_events=10
    ) as handle:
        current = client.get_workflow_handle(handle.id)

        async def same_set(_: int) -> None:
            await current.execute_update("set", schedule)  # the stored version: a no-op

        async def set_signal() -> None:
            await current.signal("set", schedule)

        errors = await flood_until_a_run_waited(client, handle.id, same_set, set_signal)
        assert errors == []
        await current.execute_update("cancel", {})
        await eventually(lambda: _no_runs(current), timeout=60)
    await check_runs(
        client,
        handle.id,
        [DurabilityScheduleWorkflow, ScheduledRunWorkflow],
        "schedule_parent_0_1_1_close_without_update",
    )
    started = [r["scheduled_time"] for r in recorder.started]
    assert len(started) == len(set(started)), "no run started twice"


# Workflow IDs whose `set` already sent its bad command (see FailsOnce).
_failed_once: set[str] = set()
UNREGISTERED = SearchAttributeKey.for_keyword("DurabilityTestNotRegistered")


@workflow.defn(name="DurabilitySchedule", sandboxed=False)
class FailsOnce:
    """Stands in for the schedule: the first workflow task that delivers a `set` or `pause`
    sends a command Temporal refuses (an unregistered search attribute), so Temporal fails
    that task and aborts the update with WorkflowNotReady, as a raced continue-as-new does."""

    @workflow.run
    async def run(self, _input: Any = None) -> None:
        await workflow.wait_condition(lambda: False)

    def _once(self) -> bool:
        update = workflow.current_update_info()
        key = f"{workflow.info().workflow_id}:{update.name if update else ''}"
        if key not in _failed_once:
            _failed_once.add(key)
            workflow.upsert_search_attributes([UNREGISTERED.value_set("x")])
        return True

    @workflow.update(name="set")
    def set_update(self, _raw: Any = None) -> bool:
        return self._once()

    @workflow.update(name="pause")
    def pause(self, _raw: Any = None) -> bool:
        return self._once()


# Not `cacheless`: its worker runs a stand-in workflow, not the product's, with the default cache.
async def test_the_client_sends_again_an_update_temporal_aborted(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue)
    async with Worker(client, task_queue=task_queue, workflows=[FailsOnce]):
        assert await durability.set_schedule(unique, "@every 1s", 1)  # update-with-start
        assert await durability.pause_schedule(unique)  # update
        events = [
            e async for e in client.get_workflow_handle(f"schedule:{unique}").fetch_history_events()
        ]
    failed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert len(failed) == 2, "Temporal refused the task of each update's first delivery"
    updates = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    ]
    assert len(updates) == 2


@workflow.defn(name="DurabilitySchedule", sandboxed=False)
class NeverAnswers:
    """Stands in for a schedule whose `pause` is never answered, as Temporal can leave an
    update completed in the task that continues as new (temporalio/temporal#6375)."""

    @workflow.run
    async def run(self, _input: Any = None) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.update(name="pause")
    async def pause(self, _raw: Any = None) -> bool:
        await workflow.wait_condition(lambda: False)
        return True


# Not `cacheless`: its worker runs a stand-in workflow, not the product's, with the default cache.
async def test_an_update_never_answered_fails_after_the_clients_bound(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue, update_timeout=timedelta(seconds=2))
    async with Worker(client, task_queue=task_queue, workflows=[NeverAnswers]):
        handle = await client.start_workflow(
            "DurabilitySchedule", id=f"schedule:{unique}", task_queue=task_queue
        )
        with pytest.raises(UnansweredError, match=r"'pause' update of 'schedule:.*within 2 s"):
            await asyncio.wait_for(durability.pause_schedule(unique), timeout=UPDATE_ANSWER_S)
        await handle.terminate("test over")


async def _no_runs(handle: WorkflowHandle[Any, Any]) -> bool:
    return not await runs_of(handle)


@pytest.mark.cacheless
async def test_updates_racing_a_ledgers_continue_as_new_are_never_aborted(
    client: Client, task_queue: str, unique: str
) -> None:
    async with live_ledger(
        client, task_queue, unique, concurrency=4, continue_as_new_after_events=20
    ) as (_, handle):
        current = client.get_workflow_handle(handle.id)

        async def enqueue_one(n: int) -> None:
            await current.execute_update(
                "enqueue", {"operations": [intent(f"op{n}", [f"c{n % 4}"])]}
            )

        async def resume_signal() -> None:
            await current.signal("resume", {})

        errors = await flood_until_a_run_waited(client, handle.id, enqueue_one, resume_signal)
        assert errors == []
        snap = await until_resolved_or_blocked(current, timeout=60)
        assert {o["outcome"] for o in operations(snap).values()} == {"applied"}
    await check_runs(
        client,
        handle.id,
        [OperationLedgerWorkflow, FrozenRequestWorkflow],
        "ledger_close_without_update_0_1_1",
    )
