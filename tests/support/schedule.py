"""Set-up the schedule tests share: start, set and drain a schedule, list its runs, read the
patch markers a history holds."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle

from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, schedule_worker


async def start_schedule(
    client: Client, task_queue: str, object_id: str, **settings: Any
) -> WorkflowHandle[Any, Any]:
    """`schedule:<object_id>` started with `settings` as its start input."""
    return await client.start_workflow(
        "DurabilitySchedule", settings, id=f"schedule:{object_id}", task_queue=task_queue
    )


def patch_ids(events: Iterable[HistoryEvent], only: str | None = None) -> list[str]:
    """The patch IDs a history's patch markers record, in order (only `only`'s, if given)."""
    return [
        patch_id
        for event in events
        if event.HasField("marker_recorded_event_attributes")
        and event.marker_recorded_event_attributes.marker_name == "core_patch"
        for payload in event.marker_recorded_event_attributes.details["patch-data"].payloads
        if (patch_id := json.loads(payload.data)["id"]) == only or only is None
    ]


async def set_schedule(handle: WorkflowHandle[Any, Any], **payload: Any) -> bool:
    """The `set` update with `payload`; whether it changed the schedule."""
    return bool(await handle.execute_update("set", payload, result_type=bool))


def every_second(**params: Any) -> dict[str, Any]:
    """The `set` payload `@every 1s`, version 1, with `params` (none: the workflow's default)."""
    return {"expression": "@every 1s", "version": 1, **({"params": params} if params else {})}


@asynccontextmanager
async def live_schedule(
    client: Client,
    task_queue: str,
    object_id: str,
    recorder: ScheduleFake,
    schedule: Mapping[str, Any] | None = None,
    **settings: Any,
) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """The recorder's worker, with the schedule of `object_id` started (`settings`: its start
    input besides the lifecycle activity) and, given `schedule`, set to it (the first set of
    a fresh schedule is applied)."""
    async with schedule_worker(client, task_queue, recorder.activities()):
        handle = await start_schedule(
            client, task_queue, object_id, **{"lifecycle_activity": "lifecycle", **settings}
        )
        if schedule is not None:
            assert await set_schedule(handle, **schedule)
        yield handle


async def runs_of(handle: WorkflowHandle[Any, Any]) -> list[dict[str, Any]]:
    """The `runs` query: every run not yet acknowledged."""
    runs: list[dict[str, Any]] = await handle.query("runs")
    return runs


async def cancel_and_drain(handle: WorkflowHandle[Any, Any], timeout: float = 30) -> None:
    """Cancel the schedule, then wait until every run it recorded has reported."""
    await handle.execute_update("cancel", {})
    await eventually(no_runs_left(handle), timeout=timeout)


def no_runs_left(handle: WorkflowHandle[Any, Any]) -> Any:
    """A check for `eventually`: the schedule holds no run."""

    async def check() -> bool:
        return not await runs_of(handle)

    return check
