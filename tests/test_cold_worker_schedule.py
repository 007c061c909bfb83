"""DurabilitySchedule on a cold worker: every kind of completion that can end a workflow task,
then every message it accepts, sent at once to a worker that starts with an empty cache.

On ca63e95 (before `workflows.barrier`), `run_completion` x `trigger` failed its workflow
tasks with BAD_CANCEL_TIMER_ATTRIBUTES and the update was refused.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.cold_worker import (
    ScheduleActivities,
    activity_worker,
    assert_healthy_and_updated,
    cold_names,
    wait_for_applied,
    workflow_worker,
)
from tests.helpers import eventually

YEARLY = "0 0 1 1 *"
Step = Callable[[WorkflowHandle[Any, Any], ScheduleActivities], Awaitable[None]]
DAY_MS = 86_400_000


async def _trigger_and_wait(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> int:
    scheduled: int = await handle.execute_update("trigger", {}, result_type=int)
    await eventually(lambda: scheduled in acts.delivered, timeout=30)
    return scheduled


# --- the completions: each drives the schedule until a task that applied one has completed


async def run_completion(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    """A run's child completes (its completion is its acknowledgement)."""
    await handle.execute_update("set", {"expression": YEARLY, "version": 1})
    await _trigger_and_wait(handle, acts)
    await wait_for_applied(handle, "CHILD_WORKFLOW_EXECUTION_COMPLETED")


async def lifecycle_completion(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    """The `due` lifecycle activity completes while the run is still going."""
    await handle.execute_update(
        "set", {"expression": YEARLY, "version": 1, "params": {"sleep_ms": 2500}}
    )
    await handle.execute_update("trigger", {})
    await wait_for_applied(handle, "ACTIVITY_TASK_COMPLETED")


async def tick_while_busy(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    """A tick fires while the only slot is busy: its run is queued."""
    await handle.execute_update(
        "set", {"expression": "@every 1s", "version": 1, "params": {"sleep_ms": 1500}}
    )

    async def queued() -> bool:
        runs = await handle.query("runs")
        return any(run["state"] == "queued" for run in runs)

    await eventually(queued, timeout=20)
    await wait_for_applied(handle, "TIMER_FIRED")


async def settle_signal(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    """A queued run waits for the only slot, held by a run whose outcome delivery is slow:
    the run took the last free slot, so it frees it by signal (`run_settled`)."""
    await handle.execute_update(
        "set", {"expression": YEARLY, "version": 1, "params": {"outcome_failures": 1}}
    )
    await handle.execute_update("trigger", {})
    await handle.execute_update("trigger", {})
    await wait_for_applied(
        handle,
        "WORKFLOW_EXECUTION_SIGNALED",
        lambda e: (
            e.workflow_execution_signaled_event_attributes.signal_name == "durability.run_settled"
        ),
    )


COMPLETIONS: dict[str, Step] = {
    "run_completion": run_completion,
    "lifecycle_completion": lifecycle_completion,
    "tick_while_busy": tick_while_busy,
    "settle_signal": settle_signal,
}


# --- the messages: each is sent at once to the new worker, then checked as applied


async def set_update(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    assert await handle.execute_update("set", {"expression": YEARLY, "version": 2}) is True
    assert (await handle.query("get"))["version"] == 2


async def set_signal(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    await handle.signal("set", {"expression": YEARLY, "version": 2})

    async def stored() -> bool:
        return (await handle.query("get") or {}).get("version") == 2

    await eventually(stored)


async def cancel_update(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    assert await handle.execute_update("cancel", {}) is True
    assert await handle.query("get") is None


async def cancel_signal(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    await handle.signal("cancel", {})

    async def cancelled() -> bool:
        return await handle.query("get") is None

    await eventually(cancelled)


async def trigger(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    await _trigger_and_wait(handle, acts)


async def pause(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    assert await handle.execute_update("pause", {}) is True
    assert await handle.query("paused") is True


async def unpause(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    # Paused before the completion (see `test_message_after_completion_on_a_cold_worker`).
    assert await handle.execute_update("unpause", {}) is True
    assert await handle.query("paused") is False


async def backfill(handle: WorkflowHandle[Any, Any], acts: ScheduleActivities) -> None:
    # A range with 1 occurrence of the yearly expression, or 3 of `@every 1s`, long past.
    start_at = (int(time.time() * 1000) - 400 * DAY_MS) // 1000 * 1000
    every_second = (await handle.query("get"))["expression"] == "@every 1s"
    end_at = start_at + 3000 if every_second else int(time.time() * 1000)
    times: list[int] = await handle.execute_update(
        "backfill", {"start_at": start_at, "end_at": end_at}, result_type=list[int]
    )
    assert len(times) == (3 if every_second else 1), times
    acts.expected.extend(times)  # delivered by the end of the test


MESSAGES: dict[str, Step] = {
    "set_update": set_update,
    "set_signal": set_signal,
    "cancel_update": cancel_update,
    "cancel_signal": cancel_signal,
    "trigger": trigger,
    "pause": pause,
    "unpause": unpause,
    "backfill": backfill,
}


@pytest.mark.parametrize("message", sorted(MESSAGES))
@pytest.mark.parametrize("completion", sorted(COMPLETIONS))
async def test_message_after_completion_on_a_cold_worker(
    client: Client, completion: str, message: str
) -> None:
    suffix, task_queue, activity_queue = cold_names()
    acts = ScheduleActivities()
    start = {
        "max_concurrent_runs": 1,
        "lifecycle_activity": "lifecycle",
        "activity_task_queue": activity_queue,
        "outcome_retries": {"initial_interval_ms": 1500},
    }
    async with activity_worker(client, activity_queue, acts.all()):
        async with workflow_worker(client, task_queue):
            handle = await client.start_workflow(
                "DurabilitySchedule", start, id=f"schedule:cold-{suffix}", task_queue=task_queue
            )
            if message == "unpause" and completion != "tick_while_busy":
                await handle.execute_update("pause", {})
            await COMPLETIONS[completion](handle, acts)
        # The only workflow worker is gone; a new one starts with nothing cached.
        async with workflow_worker(client, task_queue):
            if message == "unpause" and completion == "tick_while_busy":
                await handle.execute_update("pause", {})
            await MESSAGES[message](handle, acts)
        # Another cold worker replays what the last one recorded, then must make progress:
        # a new version and a run of it that reports.
        async with workflow_worker(client, task_queue):
            assert await handle.execute_update("set", {"expression": YEARLY, "version": 10})
            await _trigger_and_wait(handle, acts)
            await eventually(lambda: _no_runs_left(handle), timeout=30)
    assert set(acts.expected) <= set(acts.delivered)
    await assert_healthy_and_updated(client, handle)


async def _no_runs_left(handle: WorkflowHandle[Any, Any]) -> bool:
    return not await handle.query("runs")
