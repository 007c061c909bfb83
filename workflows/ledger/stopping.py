"""The effects of the ledger's `stop` update (its decisions are `core`'s stop protocol).

`stop` cancels what is in flight, waits for the last report of each request an earlier run
launched, then asks the far side once about every request it may have received, within the
bound the update carries (`StopInput`), before the ledger completes.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.ledger import core
    from workflows.ledger.launches import Dispatcher, RequestRuns, cancel_request
    from workflows.ledger.models import LedgerConfig, LedgerState, StopInput

# Asked by a `stop` with requests left unknown: it queries the far side about each before
# completing, where a run recorded without it completes at once.
STOP_QUERIES_PATCH = "stop-final-queries"
# Asked by a `stop` that cancelled requests by workflow ID: it waits for each one's last
# report, so no report lands in the task that completes the ledger.
STOP_AWAITS_REPORTS_PATCH = "ledger-stop-awaits-final-reports"
# Asked by a `stop` whose final query a lane holds back (L4): a run recorded when final
# queries were bounded by `concurrency` alone starts them as it did.
STOP_QUERY_LANES_PATCH = "ledger-stop-queries-within-lanes"
# A request that never sends its last report (terminated from outside) is given up after this.
FINAL_REPORT_WAIT = timedelta(seconds=60)


async def stop_ledger(
    state: LedgerState,
    config: LedgerConfig,
    ledger_id: str,
    dispatch: Dispatcher,
    bound: StopInput,
) -> None:
    """Carry out `stop` (its state change done by `core.begin_stop`): cancel the compiles
    and the requests in flight, wait for them, then ask the far side (`_ask_before_stopping`)."""
    compiles, requests = dispatch.compiles, dispatch.requests
    for task in list(compiles.values()):
        task.cancel()
    for task in list(requests.tasks.values()):
        task.cancel()
    # Requests launched by an earlier run (before continue-as-new) have no local task.
    earlier = core.cancel_at_stop(state, requests.tasks)
    # Each stays in flight until its last report (what it still sends is applied).
    awaits = core.stop_waits_for_reports(state) and workflow.patched(STOP_AWAITS_REPORTS_PATCH)
    for request_id in earlier:
        if not await cancel_request(ledger_id, request_id):
            core.final_report_arrived(state, request_id)  # closed: nothing to come
        if not awaits:
            core.request_interrupted(state, request_id, "stopped", stopped=True)
    await workflow.wait_condition(
        lambda: not compiles and not requests.tasks and not requests.granting
    )
    if awaits:
        await _await_final_reports(state)
        for request_id in earlier:
            core.request_interrupted(state, request_id, "stopped", stopped=True)
    if core.unknown_candidates(state) and workflow.patched(STOP_QUERIES_PATCH):
        await _ask_before_stopping(state, config, requests, bound)


def _lanes_bound_stop_queries() -> bool:
    return workflow.patched(STOP_QUERY_LANES_PATCH)


async def _await_final_reports(state: LedgerState) -> None:
    """Wait for the last report of each request `stop` cancelled by workflow ID, at most
    FINAL_REPORT_WAIT (one timer); those that never came are given up (logged)."""
    if not core.stop_waits_for_reports(state):
        return  # each had closed already
    try:
        await workflow.wait_condition(
            lambda: not core.stop_waits_for_reports(state),
            timeout=FINAL_REPORT_WAIT,
            timeout_summary="stop: last reports of cancelled requests",
        )
    except TimeoutError:
        given_up = core.final_reports_given_up(state)
        workflow.logger.warning("stop: no last report from %s", ", ".join(given_up))


async def _ask_before_stopping(
    state: LedgerState, config: LedgerConfig, requests: RequestRuns, bound: StopInput
) -> None:
    """One final query per request `core.plan_stop_queries` names, within `concurrency` and
    the lanes (`core.stop_queries_to_start`); at `query_deadline_ms` those still asking are
    cancelled (one timer)."""
    queue = core.plan_stop_queries(state, bound, config)
    if not queue:
        return
    deadline = asyncio.create_task(
        workflow.sleep(
            timedelta(milliseconds=bound.query_deadline_ms), summary="stop: final queries"
        )
    )
    asking: dict[str, asyncio.Task[None]] = {}
    while queue or asking:
        for request_id in core.stop_queries_to_start(
            state, queue, asking, config, deadline.done(), _lanes_bound_stop_queries
        ):
            if core.begin_stop_query(state, request_id):
                asking[request_id] = asyncio.create_task(requests.final_query(request_id))
        if asking:
            await workflow.wait_condition(
                lambda: deadline.done() or any(task.done() for task in asking.values())
            )
        for request_id in [r for r, task in asking.items() if task.done()]:
            finished = asking.pop(request_id)
            if not finished.cancelled():
                finished.result()  # an error in the query's task is not swallowed
        if deadline.done():
            for task in asking.values():
                task.cancel()
            await workflow.wait_condition(lambda: all(t.done() for t in asking.values()))
            break
    if not deadline.done():
        deadline.cancel()
