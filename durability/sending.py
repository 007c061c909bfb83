"""What every call of the client shares: sending an update, a signal or a query to a workflow
by its ID, and reading Temporal's refusals as the client's errors (`durability.errors`).

`ClientCore` holds the connection and the rules every call follows: a payload bounded before
it is sent, a worker looked for before a call that waits on one, an update sent again while
Temporal aborts it unapplied and bounded in time, a missing or closed workflow said as such,
and each change sent recorded (`Sent`). The capabilities' methods are built on it
(`durability.schedule_client`, `durability.ledger_client`, `durability.bulk`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.errordetails.v1 import (
    MultiOperationExecutionFailure,
    WorkflowNotReadyFailure,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryRejectedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    QueryRejectCondition,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, FailureError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durability.checks import (
    CHECKED_BY_CATALOG,
    LEDGER_ID_PREFIX,
    PARSERS,
    catalog_message,
    check,
    check_configure,
    checked,
)
from durability.connect import task_queue
from durability.errors import (
    ClosedError,
    NotFoundError,
    NoWorkerError,
    RejectedError,
    UnansweredError,
    closed_error,
    summary_for,
)
from workflows.schedule import SCHEDULE_WORKFLOW_TYPE
from workflows.validation import FORMER_TYPE

if TYPE_CHECKING:
    from workflows.catalog import Message
    from workflows.schedule.cron import NextOccurrence

# How many times an update Temporal aborted unapplied is sent (see `_send_update`).
UPDATE_ATTEMPTS = 5
SCHEDULE_WORKFLOW = SCHEDULE_WORKFLOW_TYPE

# How long an update call waits for its answer, all attempts included (`UnansweredError`).
UPDATE_TIMEOUT = timedelta(minutes=2)
# How long a query call waits for its answer, all attempts included (`UnansweredError`), and
# each attempt at most: Temporal holds a query until a worker completes the workflow's pending
# task, and one whose worker died (or that went to the dead worker's sticky queue) fails
# CANCELLED or DEADLINE_EXCEEDED. A query changes nothing, so it is asked again.
QUERY_TIMEOUT = timedelta(seconds=60)
QUERY_ATTEMPT_TIMEOUT = timedelta(seconds=10)
UNANSWERED_STATUSES = frozenset(
    {RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE}
)
# How long a call that waits for a worker looks for one polling before it refuses
# (`NoWorkerError`): a worker just started may not have polled yet.
WORKER_GRACE = timedelta(seconds=5)


# The most a message or a start input may weigh once encoded. Temporal refuses a payload over
# 2 MB, and a worker whose workflow task completion carries one (an update is echoed in its
# acceptance) fails that task again and again: the workflow is wedged. Every message the
# workflows take has its own, smaller limit; these bound what they leave unbounded (a token, a
# key, a start input's lanes), so nothing this client sends can reach the server's limit.
MAX_MESSAGE_BYTES = 256 * 1024
# A start input is carried into every continue-as-new beside the state (at most 448 KiB).
MAX_START_INPUT_BYTES = 64 * 1024


# How a closed execution's status reads in a sentence.
CLOSED_STATUS = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
}


@dataclass(frozen=True)
class WithStart:
    """A message to a schedule or ledger that starts the workflow if none runs: its update
    (update-with-start) or signal (signal-with-start) variant sends the same thing."""

    workflow_type: str
    workflow_id: str
    start_input: dict[str, Any]
    message: str
    payload: Any


def _rejection(error: WorkflowUpdateFailedError, update: str, workflow_id: str) -> RejectedError:
    cause: BaseException | None = error.cause
    if isinstance(cause, ApplicationError):
        details = cause.details[0] if cause.details else None
        former = details.get(FORMER_TYPE) if isinstance(details, dict) else None
        return RejectedError(
            cause.message, update=update, workflow_id=workflow_id, type=cause.type,
            former_type=former,
        )  # fmt: skip
    message = cause.message if isinstance(cause, FailureError) else str(cause or error)
    return RejectedError(message, update=update, workflow_id=workflow_id)


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


@dataclass
class Sent:
    """A change this client sent (`DurabilityClient.sent`): `what` ("the set update to
    schedule acct-42"), whether Temporal `answered` it, and what that `means` once answered
    ("schedule acct-42 is closing"), for a caller interrupted meanwhile to say."""

    what: str
    answered: bool = False
    means: str | None = None


def _reuse_policy(new: bool) -> WorkflowIDReusePolicy:
    """A with-start never silently replaces a closed workflow: `new` asks for it."""
    return WorkflowIDReusePolicy.ALLOW_DUPLICATE if new else WorkflowIDReusePolicy.REJECT_DUPLICATE


class ClientCore:
    """The connection and what every call shares (see the module); `DurabilityClient` is
    built on it."""

    def __init__(
        self,
        client: Client,
        task_queue_name: str | None = None,
        *,
        update_timeout: timedelta | None = UPDATE_TIMEOUT,
        next_occurrence: NextOccurrence | None = None,
        worker_grace: timedelta | None = WORKER_GRACE,
        query_timeout: timedelta | None = QUERY_TIMEOUT,
    ) -> None:
        """`update_timeout` bounds each update call (`UnansweredError`); None waits forever.
        `query_timeout` bounds each query call, which asks again (every attempt at most 10 s)
        while Temporal finds no worker to answer it; then `UnansweredError`. None: no bound.
        `next_occurrence` checks a `set` expression before it is sent (default: the built-in
        cron reading): a deployment whose schedule reads its own expressions passes its own
        (the workflow's validator still decides on a running schedule).

        Before its first update, update-with-start or query on a task queue, the client asks
        Temporal whether a worker polls that queue, and raises NoWorkerError (sending
        nothing) when none has within `worker_grace`; None skips the check. A queue found
        polled is not asked about again by this client."""
        self.temporal = client
        self.task_queue = task_queue_name or task_queue()
        self.update_timeout = update_timeout
        self.next_occurrence = next_occurrence
        self.worker_grace = worker_grace
        self.query_timeout = query_timeout
        # The changes this client sent, oldest first (a caller interrupted mid-call says
        # what was already sent).
        self.sent: list[Sent] = []
        self._polled_queues: set[str] = set()
        self._workflow_queues: dict[str, str] = {}

    # -- what every call shares --------------------------------------------------------

    async def _require_worker(self, task_queue_name: str, what: str) -> None:
        """NoWorkerError unless some worker polls `task_queue_name` for workflow tasks (asked
        until `worker_grace` has passed; a queue found polled is not asked about again)."""
        if self.worker_grace is None or task_queue_name in self._polled_queues:
            return
        request = DescribeTaskQueueRequest(
            namespace=self.temporal.namespace,
            task_queue=TaskQueue(name=task_queue_name, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.worker_grace.total_seconds()
        while True:
            described = await self.temporal.workflow_service.describe_task_queue(request)
            if described.pollers:
                self._polled_queues.add(task_queue_name)
                return
            if loop.time() >= deadline:
                raise NoWorkerError(task_queue_name, what)
            await asyncio.sleep(0.1)

    async def _require_worker_of(
        self, workflow_id: str, what: str, *, otherwise: str | None = None
    ) -> None:
        """`_require_worker` for the task queue of the running workflow `workflow_id`. With no
        running workflow, for the queue `otherwise` (a with-start's), or for none: the call
        then says it is missing or closed (NotFoundError, ClosedError)."""
        if self.worker_grace is None:
            return
        queue = self._workflow_queues.get(workflow_id)
        if queue is None:
            try:
                description = await self.temporal.get_workflow_handle(workflow_id).describe()
            except RPCError as error:
                if error.status != RPCStatusCode.NOT_FOUND:
                    raise
                description = None
            if description is not None and description.status == WorkflowExecutionStatus.RUNNING:
                queue = self._workflow_queues[workflow_id] = description.task_queue
            else:
                queue = otherwise
        if queue is not None:
            await self._require_worker(queue, what)

    async def _sending(self, what: str, call: Awaitable[Any], means: str | None = None) -> Any:
        """`await call`, recorded in `sent` as `what` (and answered once it returns)."""
        record = Sent(what, means=means)
        self.sent.append(record)
        result = await call
        record.answered = True
        return result

    async def _check_size(self, workflow_id: str, message: str, value: Any, limit: int) -> None:
        """Refuse `value` when, encoded as it is sent, it weighs more than `limit` bytes."""
        what = "start input" if message == "start" else f"{message} payload"
        try:
            [payload] = await self.temporal.data_converter.encode([value])
        except Exception as error:  # the converter raises whatever its encoder raises
            raise RejectedError(
                f"the {what} cannot be sent as JSON: {error}",
                update=message, workflow_id=workflow_id,
            ) from None  # fmt: skip
        size = payload.ByteSize()
        if size > limit:
            raise RejectedError(
                f"the {what} is {size} bytes encoded, more than the limit of {limit}",
                update=message, workflow_id=workflow_id, type="PayloadTooLarge",
            )  # fmt: skip

    async def _check_with_start(self, sent: WithStart) -> None:
        await self._check_size(sent.workflow_id, "start", sent.start_input, MAX_START_INPUT_BYTES)
        await self._check_size(sent.workflow_id, sent.message, sent.payload, MAX_MESSAGE_BYTES)

    async def _closed_or_missing(self, workflow_id: str) -> Exception | None:
        """NotFoundError or ClosedError for `workflow_id`, or None when it runs."""
        handle = self.temporal.get_workflow_handle(workflow_id)
        try:
            description = await handle.describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return NotFoundError(workflow_id)
            raise
        status = CLOSED_STATUS.get(description.status) if description.status else None
        if status is None:  # running, or continued as new: the next run runs
            return None
        return closed_error(workflow_id, status, await self._close_reason(handle))

    async def _close_reason(self, handle: WorkflowHandle[Any, Any]) -> str | None:
        """Why the closed workflow of `handle` closed, as its history records it."""
        try:
            await asyncio.wait_for(handle.result(follow_runs=False), timeout=5)
        except WorkflowFailureError as error:
            cause = error.cause
            return cause.message if isinstance(cause, FailureError) else str(cause)
        except Exception:  # the reason is a courtesy: the status is the answer
            return None
        return "stopped" if handle.id.startswith(LEDGER_ID_PREFIX) else None

    async def _answer(
        self, workflow_id: str, message: str, call: Callable[[], Awaitable[Any]]
    ) -> Any:
        """`call()`, its refusal as RejectedError, a missing or closed workflow as
        NotFoundError or ClosedError."""
        try:
            return await call()
        except WorkflowUpdateFailedError as error:
            raise _rejection(error, message, workflow_id) from error
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise
            why = await self._closed_or_missing(workflow_id)
            if why is None:
                raise
            raise why from error

    async def _update_with_start(
        self, sent: WithStart, result_type: type | None = None, *, new: bool = False
    ) -> Any:
        """Update-with-start: starts the workflow when none runs. A closed ID is refused
        (ClosedError) unless `new`; a workflow that closes in answering raises ClosedError."""
        await self._check_with_start(sent)
        # Refused before sending: an update-with-start nobody answers would still create the
        # workflow, and leave it waiting for a worker.
        await self._require_worker_of(
            sent.workflow_id,
            f"the {sent.message} update to {summary_for(sent.workflow_id)} was not sent and "
            "nothing was created (a signal, e.g. --signal, waits for no worker)",
            otherwise=self.task_queue,
        )
        operations: list[WithStartWorkflowOperation[Any, Any]] = []

        async def send() -> Any:
            operation: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
                sent.workflow_type,
                sent.start_input,
                id=sent.workflow_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=_reuse_policy(new),
                static_summary=summary_for(sent.workflow_id),
            )  # one per request: the SDK refuses to send an operation twice
            operations.append(operation)
            try:
                return await self.temporal.execute_update_with_start_workflow(
                    sent.message,
                    sent.payload,
                    start_workflow_operation=operation,
                    result_type=result_type,
                )
            except (RPCError, WorkflowAlreadyStartedError):
                # The operation's start future holds the same error: read it, so that asyncio
                # does not log it as never retrieved once the call is sent again.
                with suppress(Exception):
                    await asyncio.wait_for(operation.workflow_handle(), timeout=1)
                raise

        try:
            result = await self._answer(
                sent.workflow_id,
                sent.message,
                lambda: self._sending(
                    f"the {sent.message} update to {summary_for(sent.workflow_id)}",
                    _answered_within(self.update_timeout, sent.workflow_id, sent.message, send),
                ),
            )
        except WorkflowAlreadyStartedError as error:
            raise await self._refused_start(sent.workflow_id) from error
        await self._still_open(await operations[-1].workflow_handle())
        return result

    async def _refused_start(self, workflow_id: str) -> Exception:
        why = await self._closed_or_missing(workflow_id)
        if isinstance(why, ClosedError):
            why.start_refused = True
        return why or ClosedError(workflow_id, "closed", None, start_refused=True)

    async def _still_open(self, handle: WorkflowHandle[Any, Any]) -> None:
        """ClosedError when the run that answered closed (e.g. failed on its start input)."""
        description = await handle.describe()
        status = CLOSED_STATUS.get(description.status) if description.status else None
        if status is not None:
            raise closed_error(handle.id, status, await self._close_reason(handle))

    async def _signal_with_start(self, sent: WithStart, *, new: bool = False) -> None:
        """Fire and forget, after the checks the workflow would drop the signal for."""
        await self._check_with_start(sent)
        record = Sent(f"the {sent.message} signal to {summary_for(sent.workflow_id)}")
        self.sent.append(record)
        try:
            await self.temporal.start_workflow(
                sent.workflow_type,
                sent.start_input,
                id=sent.workflow_id,
                task_queue=self.task_queue,
                start_signal=sent.message,
                static_summary=summary_for(sent.workflow_id),
                start_signal_args=[sent.payload],
                id_reuse_policy=_reuse_policy(new),
            )
        except WorkflowAlreadyStartedError as error:
            raise await self._refused_start(sent.workflow_id) from error
        record.answered = True

    async def _update(
        self, workflow_id: str, update: str, payload: Any, result_type: type | None = None
    ) -> Any:
        await self._check_size(workflow_id, update, payload, MAX_MESSAGE_BYTES)
        await self._require_worker_of(
            workflow_id, f"the {update} update to {summary_for(workflow_id)} was not sent"
        )
        handle = self.temporal.get_workflow_handle(workflow_id)
        return await self._answer(
            workflow_id,
            update,
            lambda: self._sending(
                f"the {update} update to {summary_for(workflow_id)}",
                _answered_within(
                    self.update_timeout,
                    workflow_id,
                    update,
                    lambda: handle.execute_update(update, payload, result_type=result_type),
                ),
            ),
        )

    async def _signal(self, workflow_id: str, signal: str, payload: Any) -> None:
        await self._check_size(workflow_id, signal, payload, MAX_MESSAGE_BYTES)
        handle = self.temporal.get_workflow_handle(workflow_id)
        what = f"the {signal} signal to {summary_for(workflow_id)}"
        await self._answer(
            workflow_id, signal, lambda: self._sending(what, handle.signal(signal, payload))
        )

    async def _query(self, workflow_id: str, query: str, *args: Any) -> Any:
        """A query of the running workflow: a closed one's last state is not an answer. A
        query the worker fails (a payload it cannot decode) raises WorkflowQueryFailedError;
        one no worker answers in time (UNANSWERED_STATUSES) is asked again until `query_timeout`,
        then raises UnansweredError."""
        for arg in args:
            await self._check_size(workflow_id, query, arg, MAX_MESSAGE_BYTES)
        await self._require_worker_of(workflow_id, f"the {query} query was not sent")
        handle = self.temporal.get_workflow_handle(workflow_id)
        loop = asyncio.get_running_loop()
        bound = self.query_timeout
        deadline = None if bound is None else loop.time() + bound.total_seconds()
        pause = 0.2
        while True:
            attempt = QUERY_ATTEMPT_TIMEOUT.total_seconds()
            if deadline is not None:
                attempt = max(min(attempt, deadline - loop.time()), 0.1)

            async def ask(attempt: float = attempt) -> Any:
                return await handle.query(
                    query, *args, reject_condition=QueryRejectCondition.NOT_OPEN,
                    rpc_timeout=timedelta(seconds=attempt),
                )  # fmt: skip

            try:
                return await self._answer(workflow_id, query, ask)
            except WorkflowQueryRejectedError as error:
                status = CLOSED_STATUS.get(error.status) if error.status else None
                raise closed_error(
                    workflow_id, status or "closed", await self._close_reason(handle)
                ) from error
            except RPCError as error:
                if error.status not in UNANSWERED_STATUSES:
                    raise
                if bound is not None and deadline is not None and loop.time() >= deadline:
                    raise UnansweredError(
                        query=query, workflow_id=workflow_id, timeout=bound,
                        last_error=f"{error.status.name}: {error.message}",
                    ) from error  # fmt: skip
            delay = pause if deadline is None else min(pause, max(deadline - loop.time(), 0))
            await asyncio.sleep(delay)
            pause = min(pause * 2, 2.0)

    async def _send(
        self,
        workflow_id: str,
        message: str,
        payload: Any,
        result_type: type | None = None,
        *,
        as_signal: bool = False,
    ) -> Any:
        """Send `message` (`<capability>.<name>`, e.g. `schedule.cancel`) as an update, its
        answer returned, or `as_signal` as a signal (None). Its payload is checked first with
        the workflow's own rules where the client has them (`durability.checks`): a signal
        the workflow refused would be dropped unseen. A message the schedule reads by its
        catalog entry is sent as that entry (`send_message`)."""
        if message in CHECKED_BY_CATALOG:
            return await self.send_message(
                catalog_message(message), workflow_id, payload, as_signal=as_signal,
                result_type=result_type,
            )  # fmt: skip
        if message in PARSERS:
            check(workflow_id, message, payload)
        name = message.partition(".")[2]
        if as_signal:
            await self._signal(workflow_id, name, payload)
            return None
        return await self._update(workflow_id, name, payload, result_type)

    async def _configure(
        self, kind: str, workflow_id: str, changes: Mapping[str, Any], *, as_signal: bool = False
    ) -> Any:
        """Send `configure` of `changes` (an update, or `as_signal` a signal), checked first on
        the workflow's own settings (its `settings` query: an ID with no workflow raises
        NotFoundError, and nothing is created)."""
        current: dict[str, Any] = await self._query(workflow_id, "settings")
        checked(workflow_id, "configure", lambda: check_configure(kind, changes, current))
        if as_signal:
            await self._signal(workflow_id, "configure", dict(changes))
            return None
        return await self._update(workflow_id, "configure", dict(changes), dict)

    async def send_message(
        self,
        message: Message,
        workflow_id: str,
        payload: Any = None,
        *,
        as_signal: bool = False,
        result_type: type | None = None,
        context: dict[str, Any] | None = None,
    ) -> Any:
        """Send a catalog `message` (`workflows.catalog`) to the running workflow
        `workflow_id` as its kinds allow: an update, its answer returned, or `as_signal` a
        signal (None). The payload (None: `{}`) is read first by the message's own model, as
        the workflow reads it (with `context`): a refusal is a RejectedError naming the field,
        and nothing is sent. A message the client does not send that way (internal, or not of
        that kind) is a ValueError."""
        from workflows.catalog import Kind

        kind = Kind.SIGNAL if as_signal else Kind.UPDATE
        if message.internal or not message.is_(kind):
            raise ValueError(f"{message.name}: a client does not send it as {kind.value}")
        body = {} if payload is None else payload
        checked(workflow_id, message.name, lambda: message.parse(body, context))
        if as_signal:
            await self._signal(workflow_id, message.name, body)
            return None
        return await self._update(workflow_id, message.name, body, result_type)
