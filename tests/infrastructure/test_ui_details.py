"""What the Temporal UI shows as a workflow's Current Details, for a schedule and a ledger.

The UI reads them with the built-in `__temporal_workflow_metadata` query, as this test does.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle

from durability.client import DurabilityClient
from tests.support.helpers import eventually, running_worker
from workflows.schedule import status


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return str(metadata.current_details)


async def test_a_schedule_and_a_ledger_show_their_state_as_current_details(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue)
    async with running_worker(client, task_queue):
        await durability.set_schedule(f"ui-{unique}", "@every 1h", version=2)
        schedule = client.get_workflow_handle(f"schedule:ui-{unique}")
        shown = await eventually(lambda: current_details(schedule))
        assert "`@every 1h` version 2" in shown, shown

        operations = [
            {"id": "op-1", "operation_type": "t", "participants": ["c1"]},
            {"id": "op-2", "operation_type": "t", "participants": ["c1"], "dependencies": ["op-1"]},
        ]
        await durability.enqueue(f"ui-{unique}", operations)
        ledger = client.get_workflow_handle(f"ledger:ui-{unique}")

        async def both_resolved() -> str | None:
            details = await current_details(ledger)
            return details if "Operations: 2 resolved" in details else None

        shown = await eventually(both_resolved, timeout=30)
        assert "Canvases claimed: 0; holds: 0" in shown, shown
        await durability.stop(f"ui-{unique}")
        assert (await current_details(ledger)).startswith("**Stopped.**")


async def test_a_schedules_details_show_its_last_runs_and_next_fire_times(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue)
    async with running_worker(client, task_queue):
        object_id = f"ui-runs-{unique}"
        await durability.set_schedule(object_id, "@every 1s", version=1)
        schedule = client.get_workflow_handle(f"schedule:{object_id}")

        async def with_runs() -> str | None:
            details = await current_details(schedule)
            return details if details.count("\n- ") >= 2 else None

        shown = await eventually(with_runs, timeout=30)
        described = await durability.describe(object_id)
        assert "Last runs (newest first):" in shown, shown
        runs = [line for line in shown.splitlines() if line.startswith("- ")]
        assert 2 <= len(runs) <= status.DETAILS_RUNS, shown
        assert all(line.endswith((": complete, delivered", ": complete, pending")) for line in runs)
        [upcoming] = [line for line in shown.splitlines() if line.startswith("Next fire times: ")]
        times = [
            int(datetime.fromisoformat(t).timestamp() * 1000)
            for t in upcoming.removeprefix("Next fire times: ").split(", ")
        ]
        assert len(times) == status.DETAILS_NEXT_TIMES
        # A second apart, as `describe` has them (the details may be a tick behind it).
        assert [b - a for a, b in itertools.pairwise(times)] == [1000] * (len(times) - 1)
        assert set(times[1:]) & set(described["next_fire_times"]), (times, described)
        await schedule.terminate("test done")
