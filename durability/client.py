"""A typed client for durability's workflows, thin over `temporalio.client.Client`.

It speaks only the public wire contract (workflow types, IDs, message names and payloads
of SPEC.md), so what it does can also be done with the `temporal` CLI or any SDK.

    client = await DurabilityClient.connect()
    await client.set_schedule("acct-42", "@every 5m", version=3, params={"plan": "pro"})
    print(await client.get_schedule("acct-42"))
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict

from temporalio.api.errordetails.v1 import (
    MultiOperationExecutionFailure,
    WorkflowNotReadyFailure,
)
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.service import RPCError, RPCStatusCode

from durability.connect import connect, task_queue
from workflows import search_attributes

# How many times an update Temporal aborted unapplied is sent (see `_send_update`).
UPDATE_ATTEMPTS = 5
# How long an update call waits for its answer, all attempts included (`UnansweredError`).
UPDATE_TIMEOUT = timedelta(minutes=2)

SCHEDULE_WORKFLOW = "DurabilitySchedule"
LEDGER_WORKFLOW = "OperationLedger"


class ScheduleView(TypedDict):
    """`get` query result."""

    expression: str
    version: int
    jitter_ms: int
    next_at: int | None
    params: dict[str, Any]


class RunView(TypedDict):
    """One entry of the `runs` query."""

    scheduled_time: int
    due_at: int
    state: str
    attempt: int
    error: Any


class Listed(TypedDict):
    """One schedule or ledger found by `list_schedules` / `list_ledgers` (visibility)."""

    id: str
    workflow_id: str
    status: str
    started_at: int
    version: int | None
    next_tick_at: int | None


class EnqueueResult(TypedDict):
    """`enqueue` update result."""

    accepted: list[str]
    duplicates: list[str]
    conflicts: list[str]


class RejectedError(Exception):
    """An update was rejected by the workflow's validator; nothing was recorded."""

    def __init__(self, message: str, *, update: str, workflow_id: str) -> None:
        super().__init__(message)
        self.message = message
        self.update = update
        self.workflow_id = workflow_id


class NotFoundError(Exception):
    """No schedule or ledger workflow has that ID."""


class UnansweredError(TimeoutError):
    """No answer to an update within the client's `update_timeout`.

    The update may or may not have taken effect: read the state before sending it again.
    Temporal can leave an update completed in the workflow task that continues as new
    unanswered (temporalio/temporal#6375); without a bound its caller would wait forever.
    """

    def __init__(self, *, update: str, workflow_id: str, timeout: timedelta) -> None:
        super().__init__(
            f"no answer to the {update!r} update of {workflow_id!r} within "
            f"{timeout.total_seconds():g} s; it may or may not have taken effect: read the "
            "state before sending it again"
        )
        self.update = update
        self.workflow_id = workflow_id


def schedule_workflow_id(object_id: str) -> str:
    return f"schedule:{object_id}"


def ledger_workflow_id(ledger_id: str) -> str:
    return f"ledger:{ledger_id}"


def summary_for(workflow_id: str) -> str:
    """The UI summary of a workflow started by this client: "schedule acct-42"."""
    kind, _, business_id = workflow_id.partition(":")
    return f"{kind} {business_id}"


def set_payload(
    expression: str,
    version: int,
    jitter_ms: int | None = None,
    jitter_max_ms: int | None = None,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The wire `set` payload. `jitter_max_ms` asks the workflow to pick the jitter once."""
    if jitter_ms is not None and jitter_max_ms is not None:
        raise ValueError("give jitter_ms or jitter_max_ms, not both")
    payload: dict[str, Any] = {"expression": expression, "version": version}
    if jitter_ms is not None:
        payload["jitter_ms"] = jitter_ms
    if jitter_max_ms is not None:
        payload["jitter_ms"] = {"max_ms": jitter_max_ms}
    if params is not None:
        payload["params"] = dict(params)
    return payload


def _cancel_payload(version: int | None) -> dict[str, Any]:
    """The wire `cancel` payload; without `version` it cancels whatever version is live."""
    return {} if version is None else {"version": version}


def skip_payload(operation_id: str, reason: str | None = None) -> dict[str, Any]:
    """The wire `skip` payload; without `reason` the workflow records "skipped"."""
    payload: dict[str, Any] = {"operation_id": operation_id}
    if reason is not None:
        payload["reason"] = reason
    return payload


@dataclass(frozen=True)
class _WithStart:
    """A message to a schedule or ledger that starts the workflow if none runs: its update
    (update-with-start) or signal (signal-with-start) variant sends the same thing."""

    workflow_type: str
    workflow_id: str
    start_input: dict[str, Any]
    message: str
    payload: Any


def _to_schedule(
    object_id: str, message: str, payload: Any, options: Mapping[str, Any] | None = None
) -> _WithStart:
    start_input = {"object_id": object_id, **(options or {})}
    return _WithStart(
        SCHEDULE_WORKFLOW, schedule_workflow_id(object_id), start_input, message, payload
    )


def _set_message(
    object_id: str,
    expression: str,
    version: int,
    jitter_ms: int | None,
    jitter_max_ms: int | None,
    params: Mapping[str, Any] | None,
    options: Mapping[str, Any] | None,
) -> _WithStart:
    """What `set_schedule` and `signal_set_schedule` send (`options` is the start input)."""
    payload = set_payload(expression, version, jitter_ms, jitter_max_ms, params)
    return _to_schedule(object_id, "set", payload, options)


def _enqueue_message(
    ledger_id: str,
    operations: Sequence[Mapping[str, Any]],
    options: Mapping[str, Any] | None,
) -> _WithStart:
    """What `enqueue` and `signal_enqueue` send (`options` is the start input)."""
    start_input = {"ledger_id": ledger_id, **(options or {})}
    payload = {"operations": [dict(operation) for operation in operations]}
    return _WithStart(
        LEDGER_WORKFLOW, ledger_workflow_id(ledger_id), start_input, "enqueue", payload
    )


def _rejection_message(error: WorkflowUpdateFailedError) -> str:
    cause: BaseException | None = error.cause
    if isinstance(cause, ApplicationError | FailureError):
        return cause.message
    return str(cause or error)


@contextmanager
def _user_errors(workflow_id: str, message: str) -> Iterator[None]:
    """Turn a rejected update into RejectedError and a missing workflow into NotFoundError."""
    try:
        yield
    except WorkflowUpdateFailedError as error:
        raise RejectedError(
            _rejection_message(error), update=message, workflow_id=workflow_id
        ) from error
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise NotFoundError(f"no workflow {workflow_id!r}") from error
        raise


def _aborted_unapplied(error: RPCError) -> bool:
    """Temporal refused the workflow task that delivered the update (a continue-as-new raced
    by a new event) and aborted the update before the workflow recorded it."""
    if error.status != RPCStatusCode.FAILED_PRECONDITION:
        return False
    details = list(error.grpc_status.details)
    multi_operation = MultiOperationExecutionFailure()
    for detail in list(details):
        if detail.Unpack(multi_operation):  # update-with-start: one status per operation
            details.extend(d for status in multi_operation.statuses for d in status.details)
    return any(detail.Is(WorkflowNotReadyFailure.DESCRIPTOR) for detail in details)


async def _send_update(send: Callable[[], Awaitable[Any]]) -> Any:
    """Send an update, again (up to UPDATE_ATTEMPTS times) while Temporal aborts it unapplied.

    The workflows avoid closing a run in a task that delivered an update (workflows.kernel),
    but under a steady stream of updates and signals they close anyway after a bound, and
    an update in that task can be aborted. It never took effect, so sending it again is safe.
    """
    for attempt in range(1, UPDATE_ATTEMPTS + 1):
        try:
            return await send()
        except RPCError as error:
            if attempt == UPDATE_ATTEMPTS or not _aborted_unapplied(error):
                raise
        await asyncio.sleep(0.05 * attempt)
    raise AssertionError("unreachable")


async def _answered_within(
    timeout: timedelta | None, workflow_id: str, update: str, send: Callable[[], Awaitable[Any]]
) -> Any:
    """`_send_update(send)`, bounded by `timeout` in all (None: no bound)."""
    if timeout is None:
        return await _send_update(send)
    bound = asyncio.timeout(timeout.total_seconds())
    try:
        async with bound:
            return await _send_update(send)
    except Exception as error:
        # The SDK turns the bound's cancellation into its own error type: ask the bound.
        if bound.expired():
            raise UnansweredError(
                update=update, workflow_id=workflow_id, timeout=timeout
            ) from error
        raise


class DurabilityClient:
    """Schedules and ledgers by business ID: `acct-42`, not `schedule:acct-42`."""

    def __init__(
        self,
        client: Client,
        task_queue_name: str | None = None,
        *,
        update_timeout: timedelta | None = UPDATE_TIMEOUT,
    ) -> None:
        """`update_timeout` bounds each update call (`UnansweredError`); None waits forever."""
        self.temporal = client
        self.task_queue = task_queue_name or task_queue()
        self.update_timeout = update_timeout

    @classmethod
    async def connect(cls, task_queue_name: str | None = None) -> DurabilityClient:
        """Connect with Temporal's environment configuration and the product's converter."""
        return cls(await connect(), task_queue_name)

    # -- schedule ---------------------------------------------------------------

    def schedule_handle(self, object_id: str) -> WorkflowHandle[Any, Any]:
        return self.temporal.get_workflow_handle(schedule_workflow_id(object_id))

    async def _update_with_start(self, sent: _WithStart, result_type: type | None = None) -> Any:
        async def send() -> Any:
            operation: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
                sent.workflow_type,
                sent.start_input,
                id=sent.workflow_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary=summary_for(sent.workflow_id),
            )  # one per request: the SDK refuses to send an operation twice
            try:
                return await self.temporal.execute_update_with_start_workflow(
                    sent.message,
                    sent.payload,
                    start_workflow_operation=operation,
                    result_type=result_type,
                )
            except RPCError:
                # The operation's start future holds the same error: read it, so that asyncio
                # does not log it as never retrieved once the call is sent again.
                with suppress(Exception):
                    await asyncio.wait_for(operation.workflow_handle(), timeout=1)
                raise

        with _user_errors(sent.workflow_id, sent.message):
            return await _answered_within(self.update_timeout, sent.workflow_id, sent.message, send)

    async def _signal_with_start(self, sent: _WithStart) -> None:
        """Fire and forget: bad input is logged and dropped by the workflow."""
        await self.temporal.start_workflow(
            sent.workflow_type,
            sent.start_input,
            id=sent.workflow_id,
            task_queue=self.task_queue,
            start_signal=sent.message,
            static_summary=summary_for(sent.workflow_id),
            start_signal_args=[sent.payload],
        )

    async def _update(
        self, workflow_id: str, update: str, payload: Any, result_type: type | None = None
    ) -> Any:
        handle = self.temporal.get_workflow_handle(workflow_id)
        with _user_errors(workflow_id, update):
            return await _answered_within(
                self.update_timeout,
                workflow_id,
                update,
                lambda: handle.execute_update(update, payload, result_type=result_type),
            )

    async def _query(self, workflow_id: str, query: str, *args: Any) -> Any:
        with _user_errors(workflow_id, query):
            return await self.temporal.get_workflow_handle(workflow_id).query(query, *args)

    async def set_schedule(
        self,
        object_id: str,
        expression: str,
        version: int,
        *,
        jitter_ms: int | None = None,
        jitter_max_ms: int | None = None,
        params: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> bool:
        """Set (update-with-start); returns `applied`. `options` is the start input."""
        sent = _set_message(
            object_id, expression, version, jitter_ms, jitter_max_ms, params, options
        )
        return bool(await self._update_with_start(sent, bool))

    async def signal_set_schedule(
        self,
        object_id: str,
        expression: str,
        version: int,
        *,
        jitter_ms: int | None = None,
        jitter_max_ms: int | None = None,
        params: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """Set by signal-with-start: fire and forget (bad input is logged and dropped)."""
        sent = _set_message(
            object_id, expression, version, jitter_ms, jitter_max_ms, params, options
        )
        await self._signal_with_start(sent)

    async def cancel_schedule(self, object_id: str, version: int | None = None) -> bool:
        """Cancel (update-with-start, so a tombstone can precede the first set)."""
        sent = _to_schedule(object_id, "cancel", _cancel_payload(version))
        return bool(await self._update_with_start(sent, bool))

    async def signal_cancel_schedule(self, object_id: str, version: int | None = None) -> None:
        await self.schedule_handle(object_id).signal("cancel", _cancel_payload(version))

    async def pause_schedule(self, object_id: str) -> bool:
        """Stop ticks until unpaused; returns whether it was running. Versions are untouched."""
        return bool(await self._update(schedule_workflow_id(object_id), "pause", {}, bool))

    async def unpause_schedule(self, object_id: str) -> bool:
        """Tick again from now (ticks missed while paused are skipped)."""
        return bool(await self._update(schedule_workflow_id(object_id), "unpause", {}, bool))

    async def trigger_schedule(self, object_id: str) -> int:
        """Record a run now, outside the expression; returns its scheduled_time (epoch ms)."""
        scheduled_time: int = await self._update(
            schedule_workflow_id(object_id), "trigger", {}, int
        )
        return scheduled_time

    async def dead_letters(self, object_id: str) -> list[dict[str, Any]]:
        """Outcomes whose delivery was given up (kept up to `max_dead_letters`)."""
        letters: list[dict[str, Any]] = await self._query(
            schedule_workflow_id(object_id), "dead_letters"
        )
        return letters

    async def redeliver(self, object_id: str, idempotency_key: str) -> bool:
        """Deliver a dead-lettered outcome again (same key, same retry policy); the letter
        leaves `dead_letters` once delivered."""
        started: bool = await self._update(
            schedule_workflow_id(object_id),
            "redeliver",
            {"idempotency_key": idempotency_key},
            bool,
        )
        return started

    async def backfill_schedule(self, object_id: str, start_at: int, end_at: int) -> list[int]:
        """Record runs for the expression's occurrences in [start_at, end_at) (epoch ms)."""
        times: list[int] = await self._update(
            schedule_workflow_id(object_id),
            "backfill",
            {"start_at": start_at, "end_at": end_at},
            list,
        )
        return times

    async def get_schedule(self, object_id: str) -> ScheduleView | None:
        result: ScheduleView | None = await self._query(schedule_workflow_id(object_id), "get")
        return result

    async def list_runs(self, object_id: str) -> list[RunView]:
        result: list[RunView] = await self._query(schedule_workflow_id(object_id), "runs")
        return result

    async def list_schedules(self, query: str | None = None, limit: int = 100) -> list[Listed]:
        """Schedules found by visibility: running ones, or those matching `query` (a raw
        visibility filter such as `DurabilityScheduleVersion > 2`), newest first."""
        return await self._list(SCHEDULE_WORKFLOW, "schedule:", query, limit)

    async def _list(
        self, workflow_type: str, prefix: str, query: str | None, limit: int
    ) -> list[Listed]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where = f"WorkflowType = '{workflow_type}' AND " + (
            f"({query})" if query else "ExecutionStatus = 'Running'"
        )
        found: list[Listed] = []
        async for execution in self.temporal.list_workflows(where, limit=limit):
            attributes = execution.typed_search_attributes
            next_tick = attributes.get(search_attributes.NEXT_TICK_AT)
            found.append(
                Listed(
                    id=execution.id.removeprefix(prefix),
                    workflow_id=execution.id,
                    status=execution.status.name if execution.status else "UNKNOWN",
                    started_at=int(execution.start_time.timestamp() * 1000),
                    version=attributes.get(search_attributes.SCHEDULE_VERSION),
                    next_tick_at=None if next_tick is None else int(next_tick.timestamp() * 1000),
                )
            )
        return found

    # -- ledger -----------------------------------------------------------------

    async def list_ledgers(self, query: str | None = None, limit: int = 100) -> list[Listed]:
        """Ledgers found by visibility: running ones, or those matching `query`."""
        return await self._list(LEDGER_WORKFLOW, "ledger:", query, limit)

    def ledger_handle(self, ledger_id: str) -> WorkflowHandle[Any, Any]:
        return self.temporal.get_workflow_handle(ledger_workflow_id(ledger_id))

    async def enqueue(
        self,
        ledger_id: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
    ) -> EnqueueResult:
        """Enqueue (update-with-start); returns accepted, duplicate and conflicting IDs once
        recorded."""
        result: EnqueueResult = await self._update_with_start(
            _enqueue_message(ledger_id, operations, options)
        )
        return result

    async def signal_enqueue(
        self,
        ledger_id: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        await self._signal_with_start(_enqueue_message(ledger_id, operations, options))

    async def hold(self, ledger_id: str) -> str:
        """Stop new launches until the returned token is released."""
        token: str = await self._update(ledger_workflow_id(ledger_id), "hold", {}, str)
        return token

    async def release(self, ledger_id: str, token: str) -> None:
        await self._update(ledger_workflow_id(ledger_id), "release", {"token": token})

    async def signal_release(self, ledger_id: str, token: str) -> None:
        await self.ledger_handle(ledger_id).signal("release", {"token": token})

    async def resume(self, ledger_id: str) -> None:
        await self._update(ledger_workflow_id(ledger_id), "resume", {})

    async def signal_resume(self, ledger_id: str) -> None:
        await self.ledger_handle(ledger_id).signal("resume", {})

    async def skip(self, ledger_id: str, operation_id: str, reason: str | None = None) -> bool:
        """Resolve a stuck (pending or blocked, not in flight) operation as `skipped`.

        Its dependents then proceed. Rejected for an unknown, resolved or in-flight
        operation; `reason` (default "skipped" on the workflow side) becomes its error.
        """
        skipped = await self._update(
            ledger_workflow_id(ledger_id), "skip", skip_payload(operation_id, reason), bool
        )
        return bool(skipped)

    async def signal_skip(
        self, ledger_id: str, operation_id: str, reason: str | None = None
    ) -> None:
        await self.ledger_handle(ledger_id).signal("skip", skip_payload(operation_id, reason))

    async def stop(self, ledger_id: str) -> dict[str, Any]:
        """Stop dispatching, cancel in-flight requests; returns the final snapshot."""
        snapshot: dict[str, Any] = await self._update(ledger_workflow_id(ledger_id), "stop", {})
        return snapshot

    async def snapshot(
        self,
        ledger_id: str,
        *,
        phase: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """One page of operations (oldest first) with counts per phase; pass the page's
        `next_after` as `after` for the next one. Filters: `phase`, `limit` (1..300)."""
        page = {
            key: value
            for key, value in (("phase", phase), ("after", after), ("limit", limit))
            if value is not None
        }
        args = (page,) if page else ()
        result: dict[str, Any] = await self._query(ledger_workflow_id(ledger_id), "snapshot", *args)
        return result

    async def claims(self, ledger_id: str) -> dict[str, str]:
        result: dict[str, str] = await self._query(ledger_workflow_id(ledger_id), "claims")
        return result
