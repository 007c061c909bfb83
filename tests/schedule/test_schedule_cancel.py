"""Request Cancellation (the UI's button, `temporal workflow cancel`, `handle.cancel()`) on a
schedule: no run starts after it, and the schedule closes as cancelled only once every run
it started has reported, its outcome delivered."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError

from tests.support.fakes import ScheduleFake
from tests.support.helpers import durability_cli, eventually, record_history, schedule_worker

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


async def test_schedule_close_ends_a_schedule_and_creates_nothing_for_a_missing_id(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    fake = ScheduleFake()
    object_id = f"close-{unique}"
    cli = ("--task-queue", task_queue, "schedule", "close")
    async with schedule_worker(client, task_queue, fake.activities()):
        await client.start_workflow(
            "DurabilitySchedule", {}, id=f"schedule:{object_id}", task_queue=task_queue
        )
        closing = await durability_cli(dev_server_address, *cli, object_id, "--wait")
        assert closing.stdout.strip() == (
            f"closed: schedule {object_id} ended as cancelled, its runs reported"
        ), closing.stdout
        handle = client.get_workflow_handle(f"schedule:{object_id}")
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
        again = await durability_cli(dev_server_address, *cli, object_id, check=False)
        assert again.returncode == 1 and "is closed (cancelled" in again.stderr, again
        assert "Traceback" not in again.stderr
        missing = await durability_cli(dev_server_address, *cli, f"nope-{unique}", check=False)
    assert missing.returncode == 1 and "no such schedule" in missing.stderr, missing
    with pytest.raises(RPCError):  # nothing was created for the typo
        await client.get_workflow_handle(f"schedule:nope-{unique}").describe()
