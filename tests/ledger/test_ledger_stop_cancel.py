"""`stop` and a call still running at the far side, on the real dev server: the final query is
asked only once the submit `stop` cancelled has really ended (3.10), and an answer whose
completion `stop` interrupted is kept, the request's next action `query` (3.6)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.ledger import compile_passthrough
from tests.support.helpers import eventually, record_history
from tests.support.ledger import (
    BlockedCompletion,
    cancel_requested,
    intent,
    ledger_worker,
    start_ledger,
)
from workflows.ledger.models import LedgerInput

pytestmark = pytest.mark.cacheless


async def test_the_final_query_waits_for_the_cancelled_submit_to_end(
    client: Client, task_queue: str, unique: str
) -> None:
    calls: list[str] = []
    finish_submit = asyncio.Event()

    @activity.defn(name="submit")
    async def slow_submit(request: dict[str, Any]) -> dict[str, Any]:
        calls.append("submit")
        await finish_submit.wait()  # no heartbeat: the cancellation never reaches it
        calls.append("submit ended")
        return {"outcome": "applied"}

    @activity.defn(name="query")
    async def query(request: dict[str, Any]) -> dict[str, Any]:
        calls.append("query")
        return {"outcome": "applied"}

    async with ledger_worker(client, task_queue, [compile_passthrough, slow_submit, query]):
        handle = await client.start_workflow(
            "OperationLedger", LedgerInput(), id=f"ledger:{unique}", task_queue=task_queue
        )
        await handle.execute_update("enqueue", {"operations": [intent("a", ["c1"])]})
        await eventually(lambda: calls == ["submit"], timeout=30)
        stopping = asyncio.create_task(handle.execute_update("stop", {}, result_type=dict))
        await cancel_requested(client, unique, handle)
        for _ in range(30):  # give a final query that would not wait the time to start
            if "query" in calls:
                break
            await asyncio.sleep(0.1)
        assert calls == ["submit"]  # the cancelled submit still runs: nothing asked yet
        finish_submit.set()
        final = await stopping
        # The request's first run, with the `frozen-request-wait-cancelled` marker, and the
        # ledger that waited for it before asking.
        ledger_history = await handle.fetch_history()
        [first_run, *_] = [
            e.child_workflow_execution_started_event_attributes.workflow_execution
            for e in ledger_history.events
            if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED
        ]
        child = client.get_workflow_handle(first_run.workflow_id, run_id=first_run.run_id)
        record_history("ledger_request_wait_cancelled_0_1_1", await child.fetch_history())
        record_history("ledger_stop_wait_cancelled_0_1_1", ledger_history)
    assert calls == ["submit", "submit ended", "query"]
    assert [r["outcome"] for r in final["resolved_at_stop"]] == ["applied"]
    assert final["unknown"] == []


async def test_an_answer_whose_completion_stop_interrupts_is_kept_and_asked_next(
    client: Client, task_queue: str, unique: str
) -> None:
    far_side = BlockedCompletion()
    async with ledger_worker(client, task_queue, far_side.activities):
        handle = await start_ledger(
            client, unique, task_queue, LedgerInput(complete_activity="complete")
        )
        await handle.execute_update("enqueue", {"operations": [intent("a", ["c1"])]})
        await asyncio.wait_for(far_side.started.wait(), 30)
        # Asking none: what stop leaves is what the interrupted request recorded.
        stopping = asyncio.create_task(
            handle.execute_update("stop", {"query_limit": 0}, result_type=dict)
        )
        await cancel_requested(client, unique, handle)
        far_side.release.set()
        final = await stopping
    [unknown] = final["unknown"]
    assert unknown["last_status"] == {"outcome": "applied"}  # the answer is kept
    assert unknown["attempt"] == 1
    [request] = final["requests"]
    assert request["retry_action"] == "query"  # asked next, never submitted blind
