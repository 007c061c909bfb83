"""Request Cancellation (the UI's button, `temporal workflow cancel`, `handle.cancel()`) on a
schedule: no run starts after it, and the schedule closes as cancelled only once every run
it started has reported, its outcome delivered."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError

from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, record_history, schedule_worker

pytestmark = pytest.mark.cacheless


async def test_a_cancelled_schedule_closes_after_its_running_run_reports(
    client: Client, task_queue: str, unique: str
) -> None:
    fake = ScheduleFake()
    async with schedule_worker(client, task_queue, fake.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule", {}, id=f"schedule:cancel-{unique}", task_queue=task_queue
        )
        payload = {"expression": "@every 1s", "version": 1, "params": {"gated_run": True}}
        await handle.execute_update("set", payload)
        await eventually(lambda: fake.started, timeout=20)
        await handle.cancel()
        # Ticks go on every second, so a schedule that kept ticking would start more runs
        # (ten slots); one that closed at once would be closed already.
        await asyncio.sleep(2.5)
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        started = [run["scheduled_time"] for run in fake.started]
        assert len(started) == 1, started
        fake.run_gate.set()
        with pytest.raises(WorkflowFailureError) as closed:
            await asyncio.wait_for(handle.result(), timeout=30)
    assert isinstance(closed.value.cause, CancelledError)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert fake.accepted == started  # the run's outcome was delivered before the close
    assert len(fake.started) == 1
    record_history("schedule_parent_0_1_1_close_after_runs_on_cancel", await handle.fetch_history())
