"""The snapshot's `counters` end to end: counted once per event through a forced
continue-as-new, read by the `temporal` CLI and the `durability` CLI."""

from __future__ import annotations

import re

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from tests.support.helpers import durability_cli, eventually, temporal_query
from tests.support.ledger import enqueue, intent, live_ledger, until_resolved_or_blocked

pytestmark = pytest.mark.cacheless


async def test_counters_survive_continue_as_new_and_count_each_event_once(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    graph = [intent(f"op{n}", [f"c{n % 3}"], [f"op{n - 3}"] if n >= 3 else []) for n in range(9)]
    async with live_ledger(
        client, task_queue, unique, concurrency=3, continue_as_new_after_events=40
    ) as (_server, handle):
        first_run = handle.result_run_id
        await enqueue(handle, *graph)
        await enqueue(handle, *graph[:3])  # duplicates: not counted again
        await until_resolved_or_blocked(handle, timeout=60)
        first = client.get_workflow_handle(handle.id, run_id=first_run)

        async def continued() -> bool:
            return (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW

        await eventually(continued, timeout=30)
        counters = (await temporal_query(dev_server_address, handle.id, "snapshot"))["counters"]
        # Each request: a submit answered `accepted`, then a query answered `applied`.
        assert counters == {
            "operations_enqueued": 9,
            "operations_resolved": {"applied": 9},
            "request_attempts": {"accepted": 9, "applied": 9},
            "requests_blocked": {},
            "completion_refusals": {},
        }
        shown = await durability_cli(dev_server_address, "ledger", "snapshot", unique)
        assert "counters" in shown.stdout
        assert re.search(r"^request_attempts\.accepted\s+9$", shown.stdout, re.MULTILINE)
        await handle.terminate("test done")
