"""Temporal shell of one frozen request: the `FrozenRequest` child of `OperationLedger`.

It owns its request's submit/query loop (L7, L8); `core.next_step` decides every step. It
reports to `ledger:<ledger_id>` by signal (`request_progress` for non-final attempts,
`request_finished` for the end, `request_ended` last when cancelled; no run ID, so a report
reaches the current run after continue-as-new), and its final report is also its result.

Between attempts (L4): started with `wait_for_grants` (and once its `frozen-request-grants`
patch marker is recorded), it reports that it waits and holds no slot until the ledger's
`grant` signal names its launch and attempt; the ledger owns the retry clock. Otherwise (a
request started before 0.1.1, or by a ledger with `own_retry_timers`) it sleeps its own
durable timer and keeps its slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ChildWorkflowError,
    FailureError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from workflows import SANDBOXED, metrics
    from workflows.kernel import ShellKernel, now_ms, refusal
    from workflows.ledger import (
        FROZEN_REQUEST_WORKFLOW,
        core,
        ledger_workflow_id,
        request_workflow_id,
    )
    from workflows.ledger.models import (
        FrozenRequestInput,
        GrantInput,
        LedgerConfig,
        LedgerState,
        RequestAction,
        RequestRecord,
        RequestReport,
    )
    from workflows.validation import INVALID_START_INPUT, format_validation_error

# The FrozenRequest loop owns retries (L7, L8): one activity attempt per submit/query.
SEND_RETRY = RetryPolicy(maximum_attempts=1)
# `complete_activity` is retried by Temporal like `compile_activity` (workflows.ledger.compile):
# the same timeout and retry policy. Its failure after these attempts blocks the request.
COMPLETE_TIMEOUT = timedelta(seconds=60)
COMPLETE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3)
# New executions call `complete_activity` (when set) under this patch; a history from before
# it (or run by an older worker that ignored the field) replays without the call.
COMPLETE_PATCH = "ledger-complete-activity"
# A FrozenRequest continues-as-new after this many non-final attempts (bounded history).
REQUEST_ATTEMPTS_PER_RUN = 200
# How many times (a second apart) the ledger tries to start a request whose workflow ID is
# still taken by the request's previous run (before `resume`).
CHILD_START_TRIES = 60
# Recorded (as a patch marker) by a `FrozenRequest` started in `final_query` mode that asks
# once and ends; a run recorded without it (an older worker ignored the field) loops as before.
STOP_FINAL_QUERY_PATCH = "stop-final-query"
# Recorded (as a patch marker) by a ledger run the first time it starts a request that waits
# for grants between attempts; runs recorded without it start requests on their own timers.
LEDGER_GRANTS_PATCH = "ledger-grants-retry-slots"
# Recorded by a `FrozenRequest` run the first time it waits for a grant (never on the happy
# path); a run recorded without it (an older worker ran it) sleeps its own timer.
REQUEST_GRANTS_PATCH = "frozen-request-grants"
# While a request waits for its grant it reports again this often (its ledger may have been
# held a long time, or be gone): one timer per request run, started at its first wait, not
# one per retry. If that report cannot be delivered (the ledger is closed), the request ends
# as it does when a report fails.
GRANT_WAIT = timedelta(hours=1)
# Recorded (as a patch marker) by a `FrozenRequest` run at its first activity: a cancelled
# submit, query or completion is awaited until it has really ended on its worker
# (WAIT_CANCELLATION_COMPLETED), so the request's workflow ends (and `stop` asks its final
# query) only after; and an answer whose completion `stop` interrupted is reported to the
# ledger before the run ends, its next action `query`. A run recorded before it used
# TRY_CANCEL and reported nothing.
WAIT_CANCELLED_PATCH = "frozen-request-wait-cancelled"
# Recorded (as a patch marker) by a `FrozenRequest` run that is cancelled in its loop: it
# sends `request_ended` to the ledger before it ends, its last report (a `stop` that
# cancelled it by workflow ID waits for it). A run recorded before it ended without one.
REPORT_END_PATCH = "frozen-request-reports-end"
# Grants remembered per request run, by launch (a bound against stray signals).
MAX_GRANT_LAUNCHES = 8


def failure_message(error: BaseException) -> str:
    """The innermost failure's message (an activity's ApplicationError, a timeout...)."""
    cause: BaseException = error
    while isinstance(cause, FailureError) and cause.cause is not None:
        cause = cause.cause
    return str(cause) or type(cause).__name__


async def start_request(
    ledger_id: str, request_id: str, child_input: FrozenRequestInput, operations: str
) -> workflow.ChildWorkflowHandle[Any, Any] | None:
    """Start the request's `FrozenRequest` child (ABANDON: continue-as-new never terminates a
    request in flight); None when its workflow ID stayed taken for every try."""
    for _ in range(CHILD_START_TRIES):
        try:
            return await workflow.start_child_workflow(
                FROZEN_REQUEST_WORKFLOW,
                child_input,
                id=request_workflow_id(ledger_id, request_id),
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                static_summary=f"request {request_id} for {operations}",
            )
        except WorkflowAlreadyStartedError:
            # The previous run of this request (before resume) is still closing.
            await workflow.sleep(timedelta(seconds=1))
    return None


async def cancel_request(ledger_id: str, request_id: str) -> bool:
    """Cancel a request started by an earlier run of the ledger (no handle here); a request
    that already closed is left as it is (False)."""
    child = workflow.get_external_workflow_handle(request_workflow_id(ledger_id, request_id))
    try:
        await child.cancel()
    except FailureError as error:
        if is_cancelled_exception(error):
            raise
        workflow.logger.info("request %s already closed: %s", request_id, error)
        return False
    return True


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


def apply_final_report(state: LedgerState, config: LedgerConfig, report: RequestReport) -> bool:
    """`core.finish`, counted in the metrics when it took effect: a request's end, reported by
    its `request_finished` signal or its child's result (whichever is first)."""
    # Counted before `finish`: its compaction may drop a resolved request from the state
    # (`retention.resolved_operations: 0`).
    known = state.requests.get(report.request_id)
    operations = len(known.operation_ids) if known is not None else 0
    if not core.finish(state, config, report):
        return False
    if report.phase == "resolved":
        metrics.operations("resolved", operations)
    else:
        metrics.request_blocked("far_side", operations)
    return True


def interrupted(state: LedgerState, request_id: str, reason: str, stopped: bool) -> None:
    """`core.request_interrupted`, counted when it blocked the request (not on `stop`)."""
    if core.request_interrupted(state, request_id, reason, stopped) and not stopped:
        kind = reason.split(":", 1)[0]
        metrics.request_blocked(kind, len(state.requests[request_id].operation_ids))


def _raise_if_cancel_requested() -> None:
    """A cancel that arrives while an operation completes anyway (a signal already delivered,
    an activity already finished) is absorbed by that operation; stop here instead."""
    if workflow.cancellation_reason() is not None:
        raise asyncio.CancelledError("cancel requested")


@workflow.defn(name=FROZEN_REQUEST_WORKFLOW, sandboxed=SANDBOXED)
class FrozenRequestWorkflow:
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

    @workflow.signal(name="grant")
    def grant(self, raw: Any = None) -> None:
        """The ledger's slot for the next attempt (`GrantInput`); a bad one is logged, dropped."""
        try:
            grant = GrantInput.model_validate(raw)
        except ValidationError as error:
            message = format_validation_error("grant input", error)
            workflow.logger.warning("dropped grant signal: %s", message)
            return
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
        when it answers `{"blocked": true}`, anything else, or fails after its retries. Any
        other step, or no `complete_activity`, is returned as is."""
        if step.result != "resolved" or input.complete_activity is None:
            return step
        if not workflow.patched(COMPLETE_PATCH):
            return step  # a history from before the hook: it resolved without the call
        try:
            answer: Any = await workflow.execute_activity(
                input.complete_activity,
                args=[input.request, raw],
                task_queue=input.activity_task_queue,
                start_to_close_timeout=COMPLETE_TIMEOUT,
                retry_policy=COMPLETE_RETRY,
                summary=f"complete {input.request['id']}",
                cancellation_type=self._cancellation_type(),
            )
        except ActivityError as error:
            if is_cancelled_exception(error):
                raise  # stopped: as for a submit or query
            metrics.count(metrics.COMPLETION_REFUSALS, kind="failed")
            return core.completion_blocked(step, core.completion_failure(failure_message(error)))
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


class RequestRuns:
    """The ledger's side of each request's life: it starts the request's `FrozenRequest`
    child and awaits its end (reported by signal, by its result, or by a failure), and
    applies it to the ledger's state. `send_progress` is the ledger's progress barrier."""

    def __init__(
        self,
        ledger_id: str,
        state: LedgerState,
        config: LedgerConfig,
        kernel: ShellKernel,
        send_progress: Callable[[], None],
    ) -> None:
        self._ledger_id, self._state, self._config = ledger_id, state, config
        self._kernel = kernel
        self._send_progress = send_progress
        # The task of each request's life, by request ID. It leaves the mapping at the end of
        # its own body, before any other task can read it (not by a done-callback).
        self.tasks: dict[str, asyncio.Task[None]] = {}
        # Requests whose child is being started: continuing as new now would lose the start.
        self.starting: set[str] = set()
        # Requests whose grant signal is being sent: continuing as new now would lose it.
        self.granting: dict[str, asyncio.Task[None]] = {}

    def use_config(self, config: LedgerConfig) -> None:
        """Requests started from now on get `config`'s activities and retry (`configure`);
        those started before keep what their input says."""
        self._config = config

    def launch(self, request_id: str) -> None:
        """Start the request's life; a relaunch (resume) waits for the earlier one to end."""
        previous = self.tasks.get(request_id)
        self.tasks[request_id] = asyncio.create_task(self._run(request_id, previous))

    def grant(self, request: RequestRecord) -> None:
        """Send a request `core.pump` granted a slot (L4) its `grant` (a request started by an
        earlier run of the ledger too: the signal goes by workflow ID)."""
        send = self._grant(request.id, request.launch, request.attempt)
        self.granting[request.id] = asyncio.create_task(send)

    def cancel(self, request_id: str) -> None:
        """End the waiting loop of a request the core blocked (it is recorded already): its
        task's, or by workflow ID when an earlier run of the ledger started it."""
        task = self.tasks.get(request_id)
        if task is not None:
            task.cancel()
            return
        self.granting[request_id] = asyncio.create_task(self._cancel(request_id))

    async def _cancel(self, request_id: str) -> None:
        core.cancel_by_id(self._state, request_id)
        try:
            if not await cancel_request(self._ledger_id, request_id):
                core.final_report_arrived(self._state, request_id)  # closed: nothing to come
        finally:
            self.granting.pop(request_id, None)

    async def _grant(self, request_id: str, launch: int, attempt: int) -> None:
        child = workflow.get_external_workflow_handle(
            request_workflow_id(self._ledger_id, request_id)
        )
        try:
            await child.signal("grant", {"launch": launch, "attempt": attempt})
        except FailureError as error:
            if is_cancelled_exception(error):
                raise
            # Its workflow closed without reporting (terminated from outside): blocked until
            # resume, as when the run that started it sees it fail.
            reason = f"request_workflow_failed: grant not delivered: {failure_message(error)}"
            interrupted(self._state, request_id, reason, self._state.stopped)
            self._kernel.wake()
            self._send_progress()
        finally:
            self.granting.pop(request_id, None)

    async def _run(self, request_id: str, previous: asyncio.Task[None] | None) -> None:
        me = asyncio.current_task()
        try:
            if previous is not None:
                await workflow.wait_condition(previous.done)
            await self._lifetime(request_id, me)
        except asyncio.CancelledError:
            interrupted(self._state, request_id, "stopped", stopped=True)
            raise
        finally:
            if self.tasks.get(request_id) is me:
                del self.tasks[request_id]
            self._kernel.wake()
        # A request's end (or its child's) changes what the ledger decides next.
        self._send_progress()

    async def _lifetime(self, request_id: str, me: asyncio.Task[Any] | None) -> None:
        """Start the request's child and wait for its end (reported by signal, or a failure)."""
        state = self._state
        # The patch is asked only where a request starts (never by a ledger on own timers).
        grants = not self._config.own_retry_timers and workflow.patched(LEDGER_GRANTS_PATCH)
        child_input = core.request_input(state, self._config, self._ledger_id, request_id, grants)
        self.starting.add(request_id)
        operations = ", ".join(state.requests[request_id].operation_ids)
        try:
            handle = await start_request(self._ledger_id, request_id, child_input, operations)
        finally:
            self.starting.discard(request_id)
        if handle is None:
            interrupted(state, request_id, "request_workflow_already_running", stopped=False)
            return
        try:
            result = await handle
        except ChildWorkflowError as error:
            if self.tasks.get(request_id) is not me:
                return  # an earlier loop of a request relaunched since (resume)
            reason, stopped = core.request_workflow_ended(
                state, request_id, is_cancelled_exception(error), str(error.cause)
            )
            interrupted(state, request_id, reason, stopped=stopped)
            return
        try:
            report = core.parse_report(result)
        except core.InvalidRequest:
            workflow.logger.warning("request %s returned %r", request_id, result)
            return
        apply_final_report(state, self._config, report)

    async def final_query(self, request_id: str) -> None:
        """`stop`'s final query of one request (`core.begin_stop_query` done): start its
        `FrozenRequest` in `final_query` mode and apply its answer; a query that ends
        without one (its workflow failed, or cancelled at the deadline) leaves the request
        unknown."""
        state = self._state
        child_input = core.stop_query_input(state, self._config, self._ledger_id, request_id)
        operations = ", ".join(state.requests[request_id].operation_ids)
        try:
            handle = await start_request(self._ledger_id, request_id, child_input, operations)
            result = None if handle is None else await handle
        except ChildWorkflowError as error:
            workflow.logger.warning("stop query of %s ended: %s", request_id, error.cause)
            result = None
        except asyncio.CancelledError:
            core.stop_query_unanswered(state, request_id)
            raise
        finally:
            self._kernel.wake()
        try:
            answered = (
                result is not None
                and core.record_stop_query(state, core.parse_report(result)) is not None
            )
        except core.InvalidRequest:
            workflow.logger.warning("stop query of %s returned %r", request_id, result)
            answered = False
        if not answered:
            core.stop_query_unanswered(state, request_id)
        self._send_progress()
