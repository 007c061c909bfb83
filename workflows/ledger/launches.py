"""The ledger's side of its requests (effects; `core` decides): it carries out a pump's plan
(`Dispatcher`: compiles, grants, launches, the retry clock), launches each request's
`FrozenRequest` child (`workflows.ledger.request`) and awaits its end (`RequestRuns`), and
applies what the child reports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ChildWorkflowError,
    FailureError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from workflows import metrics
    from workflows.kernel import ShellKernel, now_ms
    from workflows.ledger import FROZEN_REQUEST_WORKFLOW, core, request_workflow_id
    from workflows.ledger.compile import compile_operation
    from workflows.ledger.models import (
        FrozenRequestInput,
        LedgerConfig,
        LedgerState,
        RequestRecord,
        RequestReport,
    )
    from workflows.ledger.request import failure_message

# How many times (a second apart) the ledger tries to launch a request whose workflow ID is
# still taken by the request's previous run (before `resume`).
CHILD_START_TRIES = 60
# Asked where a request is launched: one launched under it waits for the ledger's grants
# between attempts; one recorded without it sleeps its own retry timers.
LEDGER_GRANTS_PATCH = "ledger-grants-retry-slots"
# Asked where the launch gate changes what a run does: a request compiled while held (or its
# slot taken since) is launched later, one of a removed protocol version is blocked.
LAUNCH_GATE_PATCH = "ledger-launch-gate"


def launch_gate() -> bool:
    """Whether this run launches through the gate (`LAUNCH_GATE_PATCH`)."""
    return workflow.patched(LAUNCH_GATE_PATCH)


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
    """Cancel a request launched by an earlier run of the ledger (no handle here); a request
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


class RequestRuns:
    """The ledger's side of each request's life: it launches each request (starts its
    `FrozenRequest` child), awaits its end (reported by signal, by its result, or by a
    failure) and applies it to the ledger's state. `send_progress` is the ledger's progress
    barrier."""

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

    def use_settings(self, config: LedgerConfig) -> None:
        """Requests launched from now on get `config`'s activities and retry (`configure`);
        those launched before keep what their input says."""
        self._config = config

    def launch(self, request_id: str) -> None:
        """Start the request's life; a relaunch (resume) waits for the earlier one to end."""
        previous = self.tasks.get(request_id)
        self.tasks[request_id] = asyncio.create_task(self._run(request_id, previous))

    def grant(self, request: RequestRecord) -> None:
        """Send a request `core.pump` granted a slot (L4) its `grant` (a request launched by an
        earlier run of the ledger too: the signal goes by workflow ID)."""
        send = self._grant(request.id, request.launch, request.attempt)
        self.granting[request.id] = asyncio.create_task(send)

    def cancel(self, request_id: str) -> None:
        """End the waiting loop of a request the core blocked (it is recorded already): its
        task's, or by workflow ID when an earlier run of the ledger launched it."""
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
            # resume, as when the run that launched it sees it fail.
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
        # The patch is asked only where a request is launched (never by a ledger on own timers).
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


class Dispatcher:
    """Carries out what `core.pump` plans: cancels the loops of requests it blocked, grants
    due retries, relaunches frozen requests, compiles ready operations (one task each, in
    `compiles` until its body ends); and keeps one timer for the next retry a slot could
    take. `send_progress` is the ledger's progress barrier."""

    def __init__(
        self,
        ledger_id: str,
        state: LedgerState,
        config: LedgerConfig,
        kernel: ShellKernel,
        send_progress: Callable[[], None],
    ) -> None:
        self._state, self._config, self._kernel = state, config, kernel
        self._send_progress = send_progress
        self.requests = RequestRuns(ledger_id, state, config, kernel, send_progress)
        self.compiles: dict[str, asyncio.Task[None]] = {}
        # The timer that wakes the ledger when a waiting request's retry is due: (due, task).
        self._retry_wake: tuple[int, asyncio.Task[None]] | None = None

    def use_settings(self, config: LedgerConfig) -> None:
        """Grants, launches and compiles from now on take `config` (`configure`)."""
        self._config = config
        self.requests.use_settings(config)

    def carry_out(self, plan: core.Pump) -> None:
        """Carry out `plan`, then set the timer for the next retry a slot could take."""
        for request_id in plan.cancel:
            self.requests.cancel(request_id)
        for granted in plan.grants:
            self.requests.grant(granted)
        for relaunched in plan.launches:
            metrics.operations("dispatched", len(relaunched.operation_ids))
            self.requests.launch(relaunched.id)
        for op_id, request_id in plan.dispatches:
            metrics.operations("dispatched")
            self.compiles[op_id] = asyncio.create_task(self._compile(op_id, request_id))
        self._wake_for_retry()

    def _wake_for_retry(self) -> None:
        """One timer for the earliest retry a slot could take now, replaced only by an earlier
        one: a slot that frees wakes the ledger anyway (a report)."""
        due = core.next_grant_due(self._state, self._config, now_ms())
        if due is None or (self._retry_wake is not None and self._retry_wake[0] <= due):
            return
        if self._retry_wake is not None:
            self._retry_wake[1].cancel()
        self._retry_wake = (due, asyncio.create_task(self._wake_at(due)))

    async def _wake_at(self, due: int) -> None:
        delay = timedelta(milliseconds=max(1, due - now_ms()))
        await workflow.sleep(delay, summary="a retry is due")
        if self._retry_wake is not None and self._retry_wake[1] is asyncio.current_task():
            self._retry_wake = None
        self._kernel.wake()

    async def _compile(self, op_id: str, request_id: str) -> None:
        state = self._state
        try:
            compiled = await compile_operation(state, self._config, op_id, request_id)
        finally:
            self.compiles.pop(op_id, None)
            self._kernel.wake()
        verdict = "stale"
        if compiled is not None or op_id in state.compiling:
            verdict = core.freeze(state, self._config, op_id, request_id, compiled, launch_gate)
        if verdict == "launch":
            self.requests.launch(request_id)  # its child's start is this task's command
        else:
            if verdict == "blocked":
                metrics.operations("blocked")
            self._send_progress()  # a blocked compile changes state and sends nothing else
