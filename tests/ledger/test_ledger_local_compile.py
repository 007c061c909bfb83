"""`local_compile`: compile as a local activity on the ledger's own worker (dev server).

The same outcomes as a normal compile activity (L6: a compile error, a non-retryable failure,
blocks the operation with its message; a transient one is retried by the compile retry
policy), and the compile result is recorded by the workflow task completion that starts the
request, before it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError

from activities.ledger import compile_passthrough, ledger_activities
from tests.support.helpers import eventually
from tests.support.ledger import (
    enqueue,
    http_input,
    intent,
    ledger_worker,
    operations,
    record_history,
    recording_server,
    start_ledger,
)

pytestmark = pytest.mark.cacheless


def _kind(event: HistoryEvent) -> str:
    return event.WhichOneof("attributes") or ""


@pytest.mark.parametrize("local_compile", [True, False], ids=["local", "remote"])
async def test_compile_outcomes_and_where_the_local_compile_is_recorded(
    client: Client, task_queue: str, unique: str, local_compile: bool
) -> None:
    """The same outcomes with compile as a local activity and as a normal one (L6)."""
    calls: Counter[str] = Counter()
    in_flight = [0, 0]  # now, most at once

    @activity.defn(name="compile")
    async def picky_compile(intent: dict[str, Any], request_id: str) -> dict[str, Any]:
        calls[intent["id"]] += 1
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        try:
            await asyncio.sleep(0.2)  # long enough for compiles started together to overlap
        finally:
            in_flight[0] -= 1
        if intent["id"] == "bad":
            raise ApplicationError("canvas c1 has no layer 7", non_retryable=True)
        if intent["id"] == "flaky" and calls["flaky"] == 1:
            raise RuntimeError("compiler warming up")
        if intent["id"] == "broken" and calls["broken"] <= 3:
            raise RuntimeError("compiler crashed")  # retryable: past the former 3 attempts
        return await compile_passthrough(intent, request_id)

    with recording_server() as server:
        activities = [picky_compile, *ledger_activities(server.base_url)[1:]]
        async with ledger_worker(client, task_queue, activities):
            config = http_input(local_compile=local_compile, concurrency=3)
            handle = await start_ledger(client, unique, task_queue, config)
            await enqueue(
                handle,
                intent("bad", ["c1"]),
                intent("later", ["c1"], ["bad"]),
                intent("flaky", ["c2"]),
                intent("broken", ["c3"]),
                intent("fine", ["c1"]),
                intent("after", ["c2"], ["flaky", "fine"]),
            )

            async def decided() -> dict[str, Any] | None:
                snap = await client.get_workflow_handle(handle.id).query("snapshot")
                ops = operations(snap)
                done = ops["after"]["phase"] == "resolved" and ops["broken"]["phase"] == "resolved"
                return snap if done else None

            snap = await eventually(decided, timeout=30)
            await handle.execute_update("stop", {})
            if local_compile:
                await record_history(client, handle.id, "local_compile")
            events = [e async for e in handle.fetch_history_events()]
    ops = operations(snap)
    assert ops["bad"]["blockers"] == ["canvas c1 has no layer 7"]
    assert calls["broken"] == 4  # transient failures are retried (TRANSIENT_RETRY)
    assert calls["flaky"] == 2
    if local_compile:  # one local activity at a time (see OperationLedgerWorkflow._pump)
        assert in_flight[1] == 1
    else:
        assert in_flight[1] > 1
    assert ops["later"]["phase"] == "pending"
    assert {ops[o]["outcome"] for o in ("fine", "flaky", "broken", "after")} == {"applied"}
    assert server.violations == []
    kinds = [_kind(e) for e in events]
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    if not local_compile:
        assert kinds.count("activity_task_scheduled_event_attributes") == 5  # not `later`
        return
    assert "activity_task_scheduled_event_attributes" not in kinds
    # L6: each request's compile marker (its result names the request) is recorded before the
    # start command of its child. (Often in the same workflow task, but not always: a local
    # activity that outlasts most of the task timeout, e.g. in retry backoff on a loaded
    # machine, makes the SDK complete the task early and start the child in a later one.)
    markers = [
        e
        for e in events
        if e.HasField("marker_recorded_event_attributes")
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    starts = [
        e for e in events if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert len(starts) == 4  # fine, flaky, broken (retried), after
    for start in starts:
        initiated = start.start_child_workflow_execution_initiated_event_attributes
        request_id = initiated.workflow_id.rsplit(":", 1)[-1]
        recorded = [
            m
            for m in markers
            if m.event_id < start.event_id
            and any(
                request_id.encode() in payload.data
                for payload in m.marker_recorded_event_attributes.details["result"].payloads
            )
        ]
        assert recorded, start
