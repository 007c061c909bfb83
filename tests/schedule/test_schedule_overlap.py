"""The `overlap` start option end to end, started and driven with the `temporal` CLI: what a
tick does when every slot is busy ("queue" is covered by
tests/schedule/test_schedule_workflow.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.client import Client

from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, schedule_worker, temporal
from tests.support.schedule import runs_of


async def _start_with_cli(address: str, task_queue: str, object_id: str, overlap: str) -> None:
    start = {
        "overlap": overlap,
        "max_concurrent_runs": 1,
        "lifecycle_activity": "lifecycle",
    }
    await temporal(
        address,
        "workflow", "start", "--type", "DurabilitySchedule", "--task-queue", task_queue,
        "--workflow-id", f"schedule:{object_id}", "--input", json.dumps(start),
    )  # fmt: skip
    await temporal(
        address,
        "workflow", "update", "execute", "--workflow-id", f"schedule:{object_id}",
        "--name", "set", "--input",
        json.dumps({"expression": "@every 1s", "version": 1, "params": {"gated_run": True}}),
    )  # fmt: skip


def _skipped(recorder: ScheduleFake) -> list[dict[str, Any]]:
    return [e for e in recorder.events if e["type"] == "skipped"]


@pytest.mark.parametrize(("overlap", "waiting"), [("skip", 0), ("buffer_one", 1)])
async def test_ticks_while_every_slot_is_busy_follow_the_overlap_policy(
    client: Client,
    dev_server_address: str,
    task_queue: str,
    unique: str,
    overlap: str,
    waiting: int,
) -> None:
    recorder = ScheduleFake()
    object_id = f"overlap-{overlap}-{unique}"
    async with schedule_worker(client, task_queue, recorder.activities()):
        await _start_with_cli(dev_server_address, task_queue, object_id, overlap)
        handle = client.get_workflow_handle(f"schedule:{object_id}")
        # The first run holds the only slot (gated) while later ticks find it busy.
        await eventually(lambda: len(_skipped(recorder)) >= 2, timeout=30)
        states = sorted(run["state"] for run in await runs_of(handle))
        assert states == sorted(["running"] + ["queued"] * waiting), states
        assert all(e["reason"] == "overlap" for e in _skipped(recorder))
        assert await handle.query("skipped_ticks") >= 2
        await handle.execute_update("cancel", {})
        recorder.run_gate.set()

        async def no_runs_left() -> bool:
            return not await runs_of(handle)

        await eventually(no_runs_left, timeout=30)
    started = [run["scheduled_time"] for run in recorder.started]
    skipped = {e["scheduled_time"] for e in _skipped(recorder)}
    assert len(started) == 1 + waiting  # the running run, then the one that waited (if any)
    assert len(set(started)) == len(started) and not skipped & set(started)  # S6
    assert sorted(run["scheduled_time"] for run, _, _ in recorder.delivered()) == sorted(started)
