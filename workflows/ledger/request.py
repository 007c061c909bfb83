"""Temporal shell of one frozen request: the `FrozenRequest` child of `OperationLedger`.

It owns its request's submit/query loop (L7, L8); `core.next_step` decides every step. It
reports to `ledger:<ledger_id>` by signal (`request_progress` for non-final attempts,
`request_finished` for the end, `request_ended` last when cancelled; no run ID, so a report
reaches the current run after continue-as-new), and its final report is also its result.

Between attempts (L4): started with `wait_for_grants` (and once its `frozen-request-grants`
patch marker is recorded), it reports that it waits and holds no slot until the ledger's
`grant` signal names its launch and attempt; the ledger owns the retry clock. Otherwise (a
request launched by a ledger with `own_retry_timers`, or recorded before grants) it sleeps its
own durable timer and keeps its slot.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    RetryState,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from workflows import SANDBOXED, metrics
    from workflows.catalog import Message
    from workflows.handlers import CatalogShell, handlers_from
    from workflows.kernel import now_ms, read_message, refusal
    from workflows.ledger import (
        FROZEN_REQUEST_WORKFLOW,
        core,
        ledger_workflow_id,
    )
    from workflows.ledger.messages import REQUEST_MESSAGES
    from workflows.ledger.models import (
        FrozenRequestInput,
        GrantInput,
        RequestAction,
        RequestReport,
    )
    from workflows.validation import INVALID_START_INPUT, InvalidRequest, format_validation_error

# The FrozenRequest loop owns retries (L7, L8): one activity attempt per submit/query.
SEND_RETRY = RetryPolicy(maximum_attempts=1)
# `complete_activity` is retried by Temporal like `compile_activity` (workflows.ledger.compile):
# the same timeout and retry policy. Its failure after these attempts blocks the request.
COMPLETE_TIMEOUT = timedelta(seconds=60)
COMPLETE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3)
# Asked before calling `complete_activity` (when set): a run recorded without the call replays.
COMPLETE_PATCH = "ledger-complete-activity"
# A transient failure of an activity the ledger runs (a timeout, a worker lost, any retryable
# error) is retried with backoff up to a minute apart for `TRANSIENT_RETRY_WINDOW`; only a
# refusal (a non-retryable error) ends it at once. Long enough for a worker restart, a deploy
# or a short outage; bounded so that a compile never holds its slot, its canvases and the
# ledger's continue-as-new forever (a local compile's retries are recorded in the history).
TRANSIENT_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=0,
)
TRANSIENT_RETRY_WINDOW = timedelta(minutes=30)
# Asked before calling `complete_activity` under `TRANSIENT_RETRY`: a run recorded with at
# most 3 attempts replays so.
COMPLETE_RETRY_PATCH = "ledger-complete-retries-transient"
# A FrozenRequest continues-as-new after this many non-final attempts (bounded history).
REQUEST_ATTEMPTS_PER_RUN = 200
# Asked in `final_query` mode, which asks once and ends: a run recorded looping replays so.
STOP_FINAL_QUERY_PATCH = "stop-final-query"
# Asked where a request would wait for a grant: one recorded sleeping its own timer replays.
REQUEST_GRANTS_PATCH = "frozen-request-grants"
# While a request waits for its grant it reports again this often (its ledger may have been
# held a long time, or be gone): one timer per request run, started at its first wait, not
# one per retry. If that report cannot be sent (the ledger is closed), the request ends
# as it does when a report fails.
GRANT_WAIT = timedelta(hours=1)
# Asked at the first activity: a cancelled submit, query or completion is awaited until it
# has ended on its worker (WAIT_CANCELLATION_COMPLETED), so `stop` asks its final query only
# after; and an answer whose completion `stop` interrupted is reported (next action `query`).
# A run recorded with TRY_CANCEL, reporting nothing, replays so.
WAIT_CANCELLED_PATCH = "frozen-request-wait-cancelled"
# Asked by a run cancelled in its loop: it sends `request_ended`, its last report, before it
# ends (a `stop` that cancelled it by workflow ID waits for it).
REPORT_END_PATCH = "frozen-request-reports-end"
# Grants remembered per request run, by launch (a bound against stray signals).
MAX_GRANT_LAUNCHES = 8


def failure_message(error: BaseException) -> str:
    """The innermost failure's message (an activity's ApplicationError, a timeout...)."""
    cause: BaseException = error
    while isinstance(cause, FailureError) and cause.cause is not None:
        cause = cause.cause
    return str(cause) or type(cause).__name__


def is_refusal(error: BaseException) -> bool:
    """Whether an activity's failure is its refusal (a non-retryable error), not a transient
    failure (a timeout, a lost worker, a retryable error that outlasted its retries)."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.non_retryable:
            return True
        if (
            isinstance(cause, ActivityError)
            and cause.retry_state == RetryState.NON_RETRYABLE_FAILURE
        ):
            return True
        cause = cause.cause if isinstance(cause, FailureError) else None
    return False


def _answer(raw: Any) -> str:
    """The `answer` label of a submit/query answer: blocked, one of the outcomes, or unknown."""
    status = core.normalize_status(raw)
    if status.outcome in ("applied", "rejected", "accepted") and not status.blocked:
        return str(status.outcome)
    if status.blocked:
        return "blocked"
    return (
        "unresolved" if isinstance(raw, dict) and raw.get("outcome") == "unresolved" else "unknown"
    )


def _raise_if_cancel_requested() -> None:
    """A cancel that arrives while an operation completes anyway (a signal already delivered,
    an activity already finished) is absorbed by that operation; stop here instead."""
    if workflow.cancellation_reason() is not None:
        raise asyncio.CancelledError("cancel requested")


@workflow.defn(name=FROZEN_REQUEST_WORKFLOW, sandboxed=SANDBOXED)
@handlers_from(REQUEST_MESSAGES)
class FrozenRequestWorkflow(CatalogShell):
    """Submit, then query, one frozen request until it resolves or blocks (L7-L10).

    The request body never changes; every call carries it whole, with its idempotency key.
    Every report goes to the ledger by signal; the final report is also the result.
    """

    def __init__(self) -> None:
        # launch -> the highest attempt count the ledger granted a next attempt after.
        self._granted: dict[int, int] = {}
        # The report of the attempt whose grant is awaited (None: not waiting).
        self._waiting: RequestReport | None = None
        self._reminder: asyncio.Task[None] | None = None
        self._ledger_closed = False
        self._wait_cancelled: bool | None = None  # asked (patched) at the first activity
        self._attempt = 0  # attempts made, for the last report of a cancelled loop

    def _on_signal(self, message: Message, raw: Any) -> None:
        """`grant` (the only signal): a bad one is logged and dropped (a request keeps no
        count of dropped signals)."""
        try:
            grant = GrantInput.model_validate(read_message(f"{message.name} signal", raw))
        except ValidationError as error:
            problem = format_validation_error("grant input", error)
            workflow.logger.warning("dropped grant signal: %s", problem)
            return
        except InvalidRequest as error:
            workflow.logger.warning("dropped grant signal: %s", error)
            return
        self.apply_grant(grant)

    def apply_grant(self, grant: GrantInput) -> None:
        """The ledger's slot for the next attempt of this launch (an older grant is stale)."""
        if grant.launch not in self._granted and len(self._granted) >= MAX_GRANT_LAUNCHES:
            del self._granted[min(self._granted)]
        self._granted[grant.launch] = max(self._granted.get(grant.launch, -1), grant.attempt)

    @workflow.run
    async def run(self, input: Any) -> dict[str, Any]:
        """The loop; returns (and signals to the ledger) the final report."""
        # Validated here, not by the converter: started by hand with a bad input, the request
        # fails once, naming the field, instead of failing every workflow task.
        try:
            input = FrozenRequestInput.model_validate(input)
        except ValidationError as error:
            message = format_validation_error("FrozenRequest input", error)
            former = {INVALID_START_INPUT: "InvalidFrozenRequestInput"}
            raise refusal(message, INVALID_START_INPUT, former) from None
        request_id = str(input.request["id"])
        if input.final_query and workflow.patched(STOP_FINAL_QUERY_PATCH):
            return await self._final_query(input, request_id)
        ledger = workflow.get_external_workflow_handle(ledger_workflow_id(input.ledger_id))
        try:
            result = await self._loop(input, request_id, ledger)
        except (asyncio.CancelledError, ActivityError) as error:
            if is_cancelled_exception(error) and workflow.patched(REPORT_END_PATCH):
                await self._tell(ledger, "request_ended", self._ended(input, request_id))
            raise
        if workflow.cancellation_reason() is not None and workflow.patched(REPORT_END_PATCH):
            # Cancelled as its loop ended anyway (a final report already on its way): the
            # ledger that cancelled it still waits for this one.
            try:
                await self._tell(ledger, "request_ended", self._ended(input, request_id))
            except asyncio.CancelledError:
                await self._tell(ledger, "request_ended", self._ended(input, request_id))
        return result

    def _ended(self, input: FrozenRequestInput, request_id: str) -> RequestReport:
        """The last report of a cancelled loop: frozen, its next action `query`."""
        return RequestReport(
            request_id=request_id,
            phase="frozen",
            status={},
            attempt=self._attempt,
            next_action=RequestAction.QUERY,
            launch=input.launch,
        )

    async def _loop(
        self,
        input: FrozenRequestInput,
        request_id: str,
        ledger: workflow.ExternalWorkflowHandle[Any],
    ) -> dict[str, Any]:
        """Submit, then query, until the request resolves or blocks (or continue-as-new)."""
        self._attempt = input.attempt
        if input.not_before is not None and input.not_before > now_ms():
            await workflow.sleep(timedelta(milliseconds=input.not_before - now_ms()))
        action = input.next_action
        attempt = input.attempt
        grants: bool | None = None  # asked (patched) at the first wait only
        for _ in range(REQUEST_ATTEMPTS_PER_RUN):
            raw = await self._send(input, action, request_id)
            attempt += 1
            self._attempt = attempt
            step = core.next_step(action, raw, attempt, input.retry, now_ms())
            try:
                step = await self._complete(input, raw, step)
            except (asyncio.CancelledError, ActivityError) as error:
                answered = core.answer_at_cancel(request_id, step, attempt, input.launch)
                if is_cancelled_exception(error) and answered and self._waits_cancelled():
                    # `stop` cancelled the completion of an answer: the ledger keeps it.
                    await self._tell(ledger, "request_progress", answered)
                raise
            status = step.status.model_dump(mode="json", exclude_none=True)
            if step.result != "retry":
                report = RequestReport(
                    request_id=request_id,
                    phase="resolved" if step.result == "resolved" else "blocked",
                    status=status,
                    attempt=attempt,
                    next_action=step.next_action,
                    launch=input.launch,
                )
                await self._tell(ledger, "request_finished", report)
                return report.model_dump(mode="json")
            if grants is None:
                grants = input.wait_for_grants and workflow.patched(REQUEST_GRANTS_PATCH)
            progress = RequestReport(
                request_id=request_id,
                phase="in_flight",
                status=status,
                attempt=attempt,
                next_action=step.next_action,
                retry_at=step.retry_at,
                launch=input.launch,
                awaiting_grant=grants,
            )
            if not await self._tell(ledger, "request_progress", progress):
                # The ledger completed (stop) and recorded this request as frozen: send no more.
                return progress.model_dump(mode="json")
            _raise_if_cancel_requested()
            if not grants:
                await workflow.sleep(timedelta(milliseconds=step.delay_ms))
            elif not await self._await_grant(ledger, progress):
                return progress.model_dump(mode="json")  # the ledger is closed (as above)
            action = step.next_action
        workflow.continue_as_new(
            input.model_copy(
                update={
                    "next_action": action,
                    "attempt": attempt,
                    "not_before": None,
                }
            )
        )

    async def _send(self, input: FrozenRequestInput, action: str, request_id: str) -> Any:
        """One submit or query attempt; a failed attempt is an `unresolved` transport error."""
        name = input.submit_activity if action == "submit" else input.query_activity
        try:
            raw: Any = await workflow.execute_activity(
                name,
                input.request,
                task_queue=input.activity_task_queue,
                start_to_close_timeout=timedelta(milliseconds=input.activity_timeout_ms),
                retry_policy=SEND_RETRY,
                summary=f"{action} {request_id}",
                cancellation_type=self._cancellation_type(),
            )
        except ActivityError as error:
            if is_cancelled_exception(error):
                raise  # stopped: the loop ends here, not with a retry
            raw = {"outcome": "unresolved", "error": f"transport: {failure_message(error)}"}
            metrics.count(metrics.REQUEST_ATTEMPTS, action=str(action), answer="transport")
        else:
            metrics.count(metrics.REQUEST_ATTEMPTS, action=str(action), answer=_answer(raw))
        _raise_if_cancel_requested()
        return raw

    async def _final_query(self, input: FrozenRequestInput, request_id: str) -> dict[str, Any]:
        """`stop`'s final query: one query, no retry; the report is the result only (the
        ledger awaits it): `resolved`, `blocked`, or `frozen` with what the far side said."""
        raw = await self._send(input, "query", request_id)
        attempt = input.attempt + 1
        step = core.next_step(RequestAction.QUERY, raw, attempt, input.retry, now_ms())
        step = await self._complete(input, raw, step)
        phase = {"resolved": "resolved", "blocked": "blocked"}.get(step.result, "frozen")
        return RequestReport(
            request_id=request_id,
            phase=phase,
            status=step.status.model_dump(mode="json", exclude_none=True),
            attempt=attempt,
            next_action=RequestAction.QUERY,
            launch=input.launch,
        ).model_dump(mode="json")

    async def _complete(self, input: FrozenRequestInput, raw: Any, step: core.Step) -> core.Step:
        """A resolved step, once `complete_activity(frozen_request, status)` accepted it (it
        gets the far side's whole status as answered); blocked (L10, next action `query`)
        when it answers `{"blocked": true}`, anything else, or fails (`is_refusal`, or transiently
        for its whole retry window). Any
        other step, or no `complete_activity`, is returned as is."""
        if step.result != "resolved" or input.complete_activity is None:
            return step
        if not workflow.patched(COMPLETE_PATCH):
            return step  # a history from before the hook: it resolved without the call
        transient_retry = workflow.patched(COMPLETE_RETRY_PATCH)
        try:
            answer: Any = await workflow.execute_activity(
                input.complete_activity,
                args=[input.request, raw],
                task_queue=input.activity_task_queue,
                start_to_close_timeout=COMPLETE_TIMEOUT,
                schedule_to_close_timeout=TRANSIENT_RETRY_WINDOW if transient_retry else None,
                retry_policy=TRANSIENT_RETRY if transient_retry else COMPLETE_RETRY,
                summary=f"complete {input.request['id']}",
                cancellation_type=self._cancellation_type(),
            )
        except ActivityError as error:
            if is_cancelled_exception(error):
                raise  # stopped: as for a submit or query
            metrics.count(metrics.COMPLETION_REFUSALS, kind="failed")
            transient = transient_retry and not is_refusal(error)
            failure = core.completion_failure(failure_message(error), transient=transient)
            return core.completion_blocked(step, failure)
        _raise_if_cancel_requested()
        reason = core.completion_blocker(answer)
        if reason is None:
            return step
        metrics.count(metrics.COMPLETION_REFUSALS, kind="refused")
        return core.completion_blocked(step, reason)

    def _waits_cancelled(self) -> bool:
        """Whether this run awaits a cancelled activity's end (`WAIT_CANCELLED_PATCH`)."""
        if self._wait_cancelled is None:
            self._wait_cancelled = core.WAIT_FOR_CANCELLED_ATTEMPTS and workflow.patched(
                WAIT_CANCELLED_PATCH
            )
        return self._wait_cancelled

    def _cancellation_type(self) -> workflow.ActivityCancellationType:
        if self._waits_cancelled():
            return workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        return workflow.ActivityCancellationType.TRY_CANCEL

    async def _await_grant(
        self, ledger: workflow.ExternalWorkflowHandle[Any], progress: RequestReport
    ) -> bool:
        """Wait for the ledger's grant of the next attempt after `progress` (while the
        reminder reports it again every `GRANT_WAIT`). False when the ledger is closed."""
        launch, attempt = progress.launch or 1, progress.attempt
        self._waiting = progress
        if self._reminder is None:
            self._reminder = asyncio.create_task(self._remind(ledger))
        await workflow.wait_condition(
            lambda: self._granted.get(launch, -1) >= attempt or self._ledger_closed
        )
        self._waiting = None
        return not self._ledger_closed

    async def _remind(self, ledger: workflow.ExternalWorkflowHandle[Any]) -> None:
        """Every `GRANT_WAIT`, report again the attempt whose grant is awaited, if any."""
        while True:
            await workflow.sleep(GRANT_WAIT, summary="report again while waiting for a grant")
            waiting = self._waiting
            if waiting is not None and not await self._tell(ledger, "request_progress", waiting):
                self._ledger_closed = True
                return

    async def _tell(
        self, ledger: workflow.ExternalWorkflowHandle[Any], name: str, report: RequestReport
    ) -> bool:
        """Signal the ledger; False when it is closed (stopped): nothing is left to report to."""
        try:
            await ledger.signal(name, report.model_dump(mode="json"))
        except FailureError as error:
            if is_cancelled_exception(error):
                raise  # this request is being cancelled (stop): not a delivery problem
            workflow.logger.warning("cannot report %s to the ledger: %s", name, error)
            return False
        return True
