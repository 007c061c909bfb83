"""`stop` and a request an earlier run of the ledger started (before continue-as-new), on the
real dev server: `stop` cancels it by workflow ID and waits for its last report
(`request_ended`) before completing, so what the request still sends (here the answer whose
completion `stop` interrupted) is applied, and no report lands in the task that completes
the ledger (no failed workflow task)."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from tests.support.helpers import eventually, record_history
from tests.support.ledger import (
    cancel_requested,
    intent,
    ledger_with_blocked_completion,
)
from workflows.ledger import request_workflow_id

pytestmark = pytest.mark.cacheless


async def test_stop_waits_for_the_last_report_of_a_request_an_earlier_run_started(
    client: Client, task_queue: str, unique: str
) -> None:
    async with ledger_with_blocked_completion(client, task_queue, unique) as (far_side, handle):
        first_run = handle.result_run_id
        await handle.execute_update("enqueue", {"operations": [intent("a", ["c1"])]})
        await asyncio.wait_for(far_side.started.wait(), 30)
        # Operations waiting behind `a`'s canvas lengthen the history past the bound, then
        # spend the drain's allowance of events (`a`'s completion is still running, so the
        # ledger is not quiet; without events it would wait out the drain's 10 s).
        names = (f"op{n}" for n in itertools.count())
        current = client.get_workflow_handle(handle.id)

        async def continued() -> bool:
            first = client.get_workflow_handle(handle.id, run_id=first_run)
            if (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                return True
            await current.execute_update("enqueue", {"operations": [intent(next(names), ["c1"])]})
            return False

        await eventually(continued, timeout=30)
        latest = client.get_workflow_handle(handle.id)
        stopping = asyncio.create_task(
            latest.execute_update("stop", {"query_limit": 0}, result_type=dict)
        )
        await cancel_requested(client, unique, latest)
        far_side.release.set()
        final = await stopping
        history = await latest.fetch_history()
        record_history("ledger_stop_awaits_final_reports", history)
        [request] = [r for r in final["requests"] if r["operation_ids"] == ["a"]]
        child = client.get_workflow_handle(request_workflow_id(unique, request["id"]))
        record_history("ledger_request_reports_end", await child.fetch_history())
    events = history.events
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in [e.event_type for e in events]
    signals = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert signals[-2:] == ["request_progress", "request_ended"]  # the answer, then the end
    [unknown] = [u for u in final["unknown"] if u["request_id"] == request["id"]]
    assert unknown["last_status"] == {"outcome": "applied"}  # the answer is kept
    assert request["retry_action"] == "query"
