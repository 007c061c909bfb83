"""A query whose workflow's worker died is asked again until a worker answers, within the
client's `query_timeout`, and then ends `UnansweredError` naming the query: never Temporal's
bare "context canceled" (real dev server, real workers).

Temporal holds a query until a worker completes the workflow's pending task; with no worker
to take it the call fails CANCELLED or DEADLINE_EXCEEDED, as it does for a query routed to a
killed worker's sticky queue.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio.client import Client

from durability.client import DurabilityClient, UnansweredError
from durability.sending import QUERY_ATTEMPT_TIMEOUT
from tests.support.helpers import schedule_worker


async def _schedule_left_with_a_pending_task(
    client: Client, durability: DurabilityClient, task_queue: str, object_id: str
) -> None:
    """A schedule whose worker has shut down, with a workflow task (a signal's) no one takes."""
    async with schedule_worker(client, task_queue):
        await durability.set_schedule(object_id, "@yearly", 1)
        assert await durability.list_runs(object_id) == []  # the queue is known polled
    await client.get_workflow_handle(f"schedule:{object_id}").signal("pause", {})


async def test_a_query_is_asked_again_until_a_new_worker_answers(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue, query_timeout=timedelta(seconds=90))
    await _schedule_left_with_a_pending_task(client, durability, task_queue, unique)
    asked = asyncio.create_task(durability.list_runs(unique))
    # Longer than one attempt: the first fails unanswered, a later one meets the new worker.
    await asyncio.sleep(QUERY_ATTEMPT_TIMEOUT.total_seconds() + 2)
    assert not asked.done(), "the query did not wait for a worker"
    async with schedule_worker(client, task_queue):
        assert await asyncio.wait_for(asked, timeout=60) == []
        view = await durability.get_schedule(unique)
    assert view is not None and view["paused"]  # the answer came after the pending task ran


async def test_a_query_no_worker_answers_ends_unanswered_naming_it(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue, query_timeout=timedelta(seconds=3))
    await _schedule_left_with_a_pending_task(client, durability, task_queue, unique)
    with pytest.raises(UnansweredError) as unanswered:
        await asyncio.wait_for(durability.list_runs(unique), timeout=30)
    error = unanswered.value
    assert (error.query, error.update, error.workflow_id) == ("runs", None, f"schedule:{unique}")
    assert f"'runs' query of 'schedule:{unique}' within 3 s" in str(error)
    assert "a query changes nothing" in str(error)
