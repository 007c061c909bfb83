"""A request waiting for its grant never waits forever (time-skipping server): every
`GRANT_WAIT` it reports again, and once its ledger is gone it ends. Bad and stale grants make
no attempt."""

from __future__ import annotations

import uuid
from typing import Any

from temporalio import activity, workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from workflows.ledger.request import GRANT_WAIT, FrozenRequestWorkflow


@workflow.defn(name="OperationLedger", sandboxed=False)
class ReportCounter:
    """Stands in for the ledger: counts `request_progress` reports until told to `quit`."""

    def __init__(self) -> None:
        self.reports = 0
        self.done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.done)
        return self.reports

    @workflow.signal(name="request_progress")
    def request_progress(self, _raw: Any) -> None:
        self.reports += 1

    @workflow.signal
    def quit(self) -> None:
        self.done = True

    @workflow.query
    def count(self) -> int:
        return self.reports


@activity.defn(name="busy_submit")
async def busy_submit(_request: dict[str, Any]) -> dict[str, Any]:
    return {"outcome": "unresolved", "error": "http 503", "retry_after_ms": 1000}


async def test_a_waiting_request_reports_again_then_ends_once_its_ledger_is_gone(
    time_skipping_env: WorkflowEnvironment,
) -> None:
    client = time_skipping_env.client
    suffix = uuid.uuid4().hex[:8]
    queue = f"grant-wait-{suffix}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[ReportCounter, FrozenRequestWorkflow],
        activities=[busy_submit],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        ledger = await client.start_workflow(
            ReportCounter.run, id=f"ledger:{suffix}", task_queue=queue
        )
        request = await client.start_workflow(
            "FrozenRequest",
            {
                "ledger_id": suffix,
                "request": {"id": "r1", "idempotency_key": "r1"},
                "submit_activity": "busy_submit",
                "query_activity": "busy_submit",
                "wait_for_grants": True,
            },
            id=f"request:{suffix}:r1",
            task_queue=queue,
        )
        # A bad grant is dropped and a stale one (for attempt 0) ignored: no attempt is made.
        await request.signal("grant", {"launch": "one"})
        await request.signal("grant", {"launch": 1, "attempt": 0})
        await request.signal("grant", {"launch": 2, "attempt": 1})  # another launch's
        # No grant comes: after GRANT_WAIT the request reports the same attempt again.
        await time_skipping_env.sleep(GRANT_WAIT.total_seconds() + 60)
        assert await ledger.query(ReportCounter.count) == 2
        await ledger.signal(ReportCounter.quit)
        assert await ledger.result() == 2
        # The ledger is gone: the next reminder cannot be delivered, and the request ends.
        result = await request.result()
    assert (result["phase"], result["attempt"], result["awaiting_grant"]) == (
        "in_flight",
        1,
        True,
    )
    kinds = [e.WhichOneof("attributes") async for e in request.fetch_history_events()]
    # One reminder timer for the run (not one per wait), then one more after the first fired.
    assert kinds.count("timer_started_event_attributes") == 2
