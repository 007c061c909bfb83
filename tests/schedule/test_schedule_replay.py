"""Replay committed histories of DurabilitySchedule and ScheduledRun (S14): a change to the
workflow code that breaks determinism fails here. The histories were recorded by release
0.1.0 (`docs/upgrading.md`, versioning policy); a later change that alters commands keeps them
replaying with a patch, and records its own next to them with
`python -m tests.schedule.test_schedule_replay _<version>` (starts its own dev server).

- `schedule_parent_0_1_0.json`, `schedule_run_0_1_0.json`: ticks, a higher version with
  jitter, a dropped bad signal, continue-as-new, cancel.
- `schedule_parent_0_1_0_messages.json`, `schedule_run_0_1_0_messages.json`: one slot, so
  runs queue and the one that takes the last slot reports its end by signal; pause, unpause,
  trigger, backfill; outcomes dead-lettered, one redelivered.
- `schedule_parent_0_1_1_close_without_update.json`, recorded by 0.1.1 with
  `tests/product/test_updates_racing_close.py`: a run that waited for a task without updates before
  continuing as new (the patch `close-in-a-task-without-updates`).
- `schedule_parent_0_1_1_resumed_redelivery.json`, recorded by 0.1.1 with
  `tests/schedule/test_schedule_dead_letters.py`: a run that started again the redelivery its
  predecessor left going (the patch `resume-carried-redeliveries`).
- `schedule_parent_0_1_1_state_memo.json`, recorded by 0.1.1 with
  `tests/product/test_list_state.py`: a schedule set, paused and unpaused, publishing its state
  memo at each change (the patch `schedule-state-memo`).
- `schedule_parent_0_1_1_pause_on_failure.json`, recorded by 0.1.1 with
  `tests/schedule/test_schedule_bounds.py`: a schedule started with `pause_on_failure` (the
  patch `schedule-bounds`) that a failed run paused with its note; a new version, unpause,
  `pause` with a note and a refused note.
- `schedule_parent_0_1_1_bulk_signals.json`, recorded by 0.1.1 with
  `tests/schedule/test_schedule_bulk.py`: a schedule paused, unpaused and cancelled by the
  signals of bulk commands' batch jobs (no new command: no patch).
- `schedule_run_0_1_1_plugin_timeout.json`, `schedule_run_0_1_1_plugin_complete.json`,
  recorded by 0.1.1 with `tests/schedule/test_schedule_run_host.py`: plugin-hosted runs, one timed
  out in its worker and one complete (the patch `scheduled-run-0.1.1-paths`: no run timer).
- `schedule_run_0_1_1_external_timer.json`, recorded by the build before the patch
  `run-paths-from-input` (its `tests/schedule/test_schedule_run_host.py`): an external run timed
  out by its run timer, with the marker of `scheduled-run-0.1.1-paths`. These four, with
  `run_paths` written into their input, are what a worker of the build before records for a
  run a current schedule started (`test_a_run_an_older_worker_ran_for_a_current_schedule_replays`).
- `schedule_run_0_1_1_plugin_timeout_paths_from_input.json`,
  `schedule_run_0_1_1_plugin_complete_paths_from_input.json`,
  `schedule_run_0_1_1_external_server_timeout.json`,
  `schedule_parent_0_1_1_run_paths_from_input.json`,
  recorded with the patch `run-paths-from-input` by `tests/schedule/test_schedule_run_host.py`:
  runs started with `run_paths` (no patch marker; the external run timed out by the server,
  then its stop allowance) and the schedule that started the external one (the marker).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHistory

from activities.schedule import schedule_activities
from harness.replay import production_replayer
from tests.support.fakes import ScheduleFake
from tests.support.helpers import (
    HISTORY_DIR,
    save_history,
    schedule_worker,
    start_dev_server,
)
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

SCHEDULE_HISTORIES = sorted(HISTORY_DIR.glob("schedule_*.json"))


@pytest.mark.parametrize("path", SCHEDULE_HISTORIES, ids=lambda p: p.name)
async def test_recorded_history_replays_without_nondeterminism(path: Path) -> None:
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    replayer = production_replayer([DurabilityScheduleWorkflow, ScheduledRunWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


def _with_run_paths(recorded: dict[str, Any]) -> WorkflowHistory:
    """The recorded run history with `run_paths` set in its start input: what a run a
    schedule of this build started, run by a worker of the build before (which ignores the
    field, asks `scheduled-run-0.1.1-paths` and keeps its run timer), records."""
    history = copy.deepcopy(recorded["history"])
    started = history["events"][0]["workflowExecutionStartedEventAttributes"]
    [payload] = started["input"]["payloads"]
    run_input = json.loads(base64.b64decode(payload["data"]))
    assert "run_paths" not in run_input
    run_input["run_paths"] = True
    payload["data"] = base64.b64encode(json.dumps(run_input).encode()).decode()
    return WorkflowHistory.from_json(recorded["workflow_id"], history)


# Runs recorded by the build before `run-paths-from-input`, which asked the patch.
RUNS_WITH_PATHS_MARKER = [
    "schedule_run_0_1_1_ends_when_run_stops.json",
    "schedule_run_0_1_1_plugin_complete.json",
    "schedule_run_0_1_1_plugin_timeout.json",
    "schedule_run_0_1_1_external_timer.json",
]


@pytest.mark.parametrize("name", RUNS_WITH_PATHS_MARKER)
async def test_a_run_an_older_worker_ran_for_a_current_schedule_replays(name: str) -> None:
    """A rolling upgrade: a schedule of this build starts a run with `run_paths`, a worker of
    the build before runs it (marker, run timer on the external path). A worker of this
    build that replays it takes the paths the marker says, not the field's."""
    recorded = json.loads((HISTORY_DIR / name).read_text())
    replayer = production_replayer([ScheduledRunWorkflow])
    result = await replayer.replay_workflow(
        _with_run_paths(recorded), raise_on_replay_failure=False
    )
    assert result.replay_failure is None, f"{name}: {result.replay_failure}"


def test_histories_of_both_workflows_are_committed() -> None:
    names = {p.name for p in SCHEDULE_HISTORIES}
    assert {
        f"schedule_{kind}_0_1_0{scenario}.json"
        for kind in ("parent", "run")
        for scenario in ("", "_messages")
    } <= names


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    while not await check():
        await asyncio.sleep(0.2)


async def record_messages(client: Client, suffix: str) -> None:
    """One slot, pause/unpause, trigger, backfill, dead letters and a redelivery."""
    task_queue = f"record-{uuid.uuid4().hex[:8]}"
    object_id = f"replay-messages{suffix}"
    receiver = ScheduleFake(refusing=True)
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {
                "max_concurrent_runs": 1,
                "max_dead_letters": 2,
                "outcome_retries": {"max_attempts": 2, "initial_interval_ms": 50},
            },
            id=f"schedule:{object_id}",
            task_queue=task_queue,
        )
        await handle.execute_update("set", {"expression": "@every 1s", "version": 1})
        await handle.execute_update("pause", {})
        now = int(time.time() * 1000)
        await handle.execute_update("backfill", {"start_at": now - 3000, "end_at": now})
        await handle.execute_update("trigger", {})
        await handle.execute_update("unpause", {})
        await until(lambda: _count(handle.query("dead_letters"), 2))
        await handle.execute_update("cancel", {})
        await until(lambda: _count(handle.query("runs"), 0))
        receiver.refusing = False
        letters = await handle.query("dead_letters")
        await handle.execute_update(
            "redeliver", {"idempotency_key": letters[-1]["idempotency_key"]}
        )
        await until(lambda: _count(handle.query("dead_letters"), 1))
        parent = await handle.fetch_history()
        child = await client.get_workflow_handle(
            f"schedule-run:{object_id}:{letters[-1]['scheduled_time']}"
        ).fetch_history()
    save_history(f"schedule_parent{suffix}_messages", parent)
    save_history(f"schedule_run{suffix}_messages", child)
    print(f"recorded {len(parent.events)} schedule events and {len(child.events)} run events")


async def _count(query: Awaitable[list[Any]], expected: int) -> bool:
    return len(await query) == expected


async def record(client: Client, suffix: str) -> None:
    """Run a short scenario (set, ticks, a higher version with jitter, continue-as-new,
    cancel) and save the histories of the schedule's first execution and of one run."""
    task_queue = f"record-{uuid.uuid4().hex[:8]}"
    object_id = f"replay-recorded{suffix}"
    async with schedule_worker(client, task_queue, schedule_activities()):
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
    save_history(f"schedule_parent{suffix}", parent)
    save_history(f"schedule_run{suffix}", child)
    print(f"recorded {len(parent.events)} schedule events and {len(child.events)} run events")


async def _main(suffix: str) -> None:
    env = await start_dev_server()
    try:
        await record(env.client, suffix)
        await record_messages(env.client, suffix)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1] if len(sys.argv) > 1 else "_0_1_0")))
