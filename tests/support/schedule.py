"""Set-up the schedule tests share: start a schedule, read the patch markers a history holds."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle


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
