"""Replay committed histories of DurabilitySchedule and ScheduledRun (S14): a change to the
workflow code that breaks determinism fails here. After an intentional, patched change,
record the new code's histories next to the old ones with
`python -m tests.test_schedule_replay _<suffix>` (starts its own dev server).

- `schedule_parent.json`, `schedule_run.json`: before any patch (acknowledgement by signal,
  `DurabilityNextTickAt` upserted on every tick).
- `schedule_parent_ack_by_completion.json`: with the `schedule-ack-by-completion` and
  `schedule-next-tick-published-per-minute` patches; `schedule_parent_0_1_barrier.json`: with
  the completion barrier (`workflows.barrier`).
- `schedule_parent_0_1.json`, `schedule_run_0_1.json`: the shape headed for 0.1.0 (a run frees
  its slot early only when asked). Run histories of the earlier pre-release shapes (a settle
  grace timer in every run) were replaced, not patched: no release ever ran them."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.schedule import schedule_activities
from durability.connect import data_converter
from durability.devserver import TIMER_SHIFT_ARGS, temporal_cli
from durability.registry import workflow_runner
from tests.helpers import production_replayer
from workflows import search_attributes
from workflows.schedule.workflow import DurabilityScheduleWorkflow, ScheduledRunWorkflow

HISTORIES = Path(__file__).parent / "histories"
SCHEDULE_HISTORIES = sorted(HISTORIES.glob("schedule_*.json"))


@pytest.mark.parametrize("path", SCHEDULE_HISTORIES, ids=lambda p: p.name)
async def test_recorded_history_replays_without_nondeterminism(path: Path) -> None:
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    replayer = production_replayer([DurabilityScheduleWorkflow, ScheduledRunWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


def test_histories_of_both_workflows_are_committed() -> None:
    names = {p.name for p in SCHEDULE_HISTORIES}
    assert {
        "schedule_parent.json",
        "schedule_run.json",
        "schedule_parent_ack_by_completion.json",
        "schedule_parent_0_1.json",
        "schedule_run_0_1.json",
    } <= names


async def record(client: Client, suffix: str) -> None:
    """Run a short scenario (set, ticks, a higher version with jitter, continue-as-new,
    cancel) and save the histories of the schedule's first execution and of one run."""
    task_queue = f"record-{uuid.uuid4().hex[:8]}"
    object_id = f"replay-recorded{suffix}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[DurabilityScheduleWorkflow, ScheduledRunWorkflow],
        activities=schedule_activities(),
        workflow_runner=workflow_runner(),
    ):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {"lifecycle_activity": "lifecycle", "continue_as_new_after_events": 120},
            id=f"schedule:{object_id}",
            task_queue=task_queue,
        )
        first_run = (await handle.describe()).run_id
        await handle.execute_update("set", {"expression": "@every 1s", "version": 1})
        await asyncio.sleep(4)
        await handle.signal(
            "set", {"expression": "*/1 * * * * *", "version": 2, "jitter_ms": {"max_ms": 100}}
        )
        await handle.signal("set", {"expression": "bad", "version": 3})  # dropped
        await asyncio.sleep(3)
        current = client.get_workflow_handle(handle.id)
        await current.execute_update("cancel", {})
        while await current.query("runs"):
            await asyncio.sleep(0.2)
        parent = await client.get_workflow_handle(handle.id, run_id=first_run).fetch_history()
        runs = await client.get_workflow_handle(handle.id, run_id=first_run).fetch_history()
        child_id = next(
            e.start_child_workflow_execution_initiated_event_attributes.workflow_id
            for e in runs.events
            if e.HasField("start_child_workflow_execution_initiated_event_attributes")
        )
        child = await client.get_workflow_handle(child_id).fetch_history()
    for name, history in (("schedule_parent", parent), ("schedule_run", child)):
        recorded = {"workflow_id": history.workflow_id, "history": json.loads(history.to_json())}
        (HISTORIES / f"{name}{suffix}.json").write_text(json.dumps(recorded, indent=1))
    print(f"recorded {len(parent.events)} schedule events and {len(child.events)} run events")


async def _main(suffix: str) -> None:
    env = await WorkflowEnvironment.start_local(
        data_converter=data_converter(),
        dev_server_existing_path=temporal_cli(),
        dev_server_extra_args=TIMER_SHIFT_ARGS,
        search_attributes=search_attributes.ALL,
        dev_server_log_level="error",
    )
    try:
        await record(env.client, suffix)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1] if len(sys.argv) > 1 else "")))
