"""A typed client for durability's workflows, thin over `temporalio.client.Client`.

It speaks only the public wire contract (workflow types, IDs, message names and payloads of
docs/contract.md), so what it does can also be done with the `temporal` CLI or any SDK.

    client = await DurabilityClient.connect()
    await client.set_schedule("acct-42", "@every 5m", version=3, params={"plan": "pro"})
    print(await client.get_schedule("acct-42"))
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from temporalio.api.batch.v1 import BatchOperationSignal
from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import BatchOperationState, TaskQueueKind, TaskQueueType
from temporalio.api.errordetails.v1 import (
    MultiOperationExecutionFailure,
    WorkflowNotReadyFailure,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    CountWorkflowExecutionsRequest,
    DescribeBatchOperationRequest,
    DescribeTaskQueueRequest,
    StartBatchOperationRequest,
)
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
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

from durability.connect import connect_client, task_queue
from durability.errors import DurabilityError, NoWorkerError
from workflows import ledger as _ledger
from workflows import search_attributes
from workflows.ledger import LEDGER_WORKFLOW as LEDGER_WORKFLOW
from workflows.limits import any_id_problem
from workflows.schedule import SCHEDULE_WORKFLOW_TYPE
from workflows.schedule import models as _schedule_models
from workflows.validation import (
    FORMER_TYPE,
    INVALID_START_INPUT,
    InvalidRequest,
    format_validation_error,
)


def schedule_workflow_id(object_id: str) -> str:
    """`schedule:<object_id>`; InvalidRequest naming the ID when it cannot be one (empty,
    blank, spaces around it, control characters, over Temporal's limits). Every call for
    an object goes through here, so a bad ID is refused before anything is sent."""
    _check_id("object_id", object_id)
    return _schedule_models.schedule_workflow_id(object_id)


def ledger_workflow_id(ledger_id: str) -> str:
    """`ledger:<ledger_id>`; InvalidRequest naming the ID when it cannot be one (see
    `schedule_workflow_id`)."""
    _check_id("ledger_id", ledger_id)
    return _ledger.ledger_workflow_id(ledger_id)


def _check_id(field: str, value: str) -> None:
    problem = any_id_problem(field, value)
    if problem is not None:
        raise InvalidRequest(problem)


# The workflows' validators (their state machines, the cron reader and the ledger's models) are
# imported by the calls that check input with them: a command that only reads loads none.
if TYPE_CHECKING:
    from workflows.schedule.cron import NextOccurrence

# How many times an update Temporal aborted unapplied is sent (see `_send_update`).
UPDATE_ATTEMPTS = 5
SCHEDULE_WORKFLOW = SCHEDULE_WORKFLOW_TYPE

# How long an update call waits for its answer, all attempts included (`UnansweredError`).
UPDATE_TIMEOUT = timedelta(minutes=2)
# How long a call that waits for a worker looks for one polling before it refuses
# (`NoWorkerError`): a worker just started may not have polled yet.
WORKER_GRACE = timedelta(seconds=5)


class ScheduleView(TypedDict):
    """`get` query result."""

    expression: str
    version: int
    jitter_ms: int
    next_at: int | None
    params: dict[str, Any]
    # Not in the query's answer: the client adds the `paused` query's, and while paused the
    # `pause_note` query's (None otherwise).
    paused: bool
    pause_note: str | None


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
    # A schedule's state (`never set`, `live`, `paused`, `cancelled`) from its state memo; None
    # for a ledger, and for a schedule that has not published one yet (a run older than 0.1.1).
    state: str | None
    # A ledger's operations per phase as of its last progress (its status memo); None for a
    # schedule, and for a ledger that has not published it yet.
    counts: dict[str, int] | None


class EnqueueResult(TypedDict):
    """`enqueue` update result."""

    accepted: list[str]
    duplicates: list[str]
    conflicts: list[str]


# The most a message or a start input may weigh once encoded. Temporal refuses a payload over
# 2 MB, and a worker whose workflow task completion carries one (an update is echoed in its
# acceptance) fails that task again and again: the workflow is wedged. Every message the
# workflows take has its own, smaller limit; these bound what they leave unbounded (a token, a
# key, a start input's lanes), so nothing this client sends can reach the server's limit.
MAX_MESSAGE_BYTES = 256 * 1024
# A start input is carried into every continue-as-new beside the state (at most 448 KiB).
MAX_START_INPUT_BYTES = 64 * 1024


class RejectedError(DurabilityError):
    """A message or start input was refused, by the workflow's validator or, before anything
    was sent, by this client with the workflow's own rules; nothing was recorded or created.

    `type` is the refusal's kind, as the workflow names it (`InvalidRequest`,
    `NoLiveSchedule`, `LedgerStopped`, `InvalidStartInput`, ...), when known; `former_type`
    the name the same refusal had in 0.1.0 where it differs (`LedgerInputError`,
    `InvalidScheduleInput`, `InvalidLedgerInput`), kept for one release.
    """

    def __init__(
        self,
        message: str,
        *,
        update: str,
        workflow_id: str,
        type: str | None = None,
        former_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.update = update
        self.workflow_id = workflow_id
        self.type = type
        self.former_type = former_type


class NotFoundError(DurabilityError):
    """No schedule or ledger workflow has that ID; nothing was created."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"no such {summary_for(workflow_id)}")
        self.workflow_id = workflow_id


# How a closed execution's status reads in a sentence.
CLOSED_STATUS = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
}


class ClosedError(DurabilityError):
    """The schedule or ledger workflow of that ID is closed (completed, failed, cancelled,
    terminated or timed out): it answers no message, and its last state is not live.

    `status` is the closed status ("failed", ...), `reason` why, when Temporal recorded one.
    A with-start (`set_schedule`, `enqueue`) refuses a closed ID unless called with
    `new=True`, which starts a new workflow under it, without the old one's state.
    """

    def __init__(
        self, workflow_id: str, status: str, reason: str | None, *, start_refused: bool = False
    ) -> None:
        super().__init__(workflow_id, status, reason)
        self.workflow_id = workflow_id
        self.status = status
        self.reason = reason
        # A with-start was refused: the ID is taken by the closed workflow.
        self.start_refused = start_refused

    @property
    def closed(self) -> str:
        """`schedule acct-42 is closed (terminated: <reason>)`."""
        because = f": {self.reason}" if self.reason else ""
        return f"{summary_for(self.workflow_id)} is closed ({self.status}{because})"

    # The refusal's kind, as `RejectedError.type` names one: None for a closed workflow in
    # general, "LedgerStopped" for a ledger that completed by `stop` (`LedgerStopped`).
    type: str | None = None
    # How a caller asks for a new workflow under the ID (the CLI says `--new`).
    NEW_ARGUMENT = "new=True"

    def __str__(self) -> str:
        return self.sentence(self.NEW_ARGUMENT)

    def sentence(self, new_argument: str) -> str:
        """The refusal as one sentence, naming how to start a new one (`new_argument`)."""
        return self.closed + (f"; {new_argument} starts a new one" if self.start_refused else "")


class LedgerStopped(ClosedError):
    """The ledger of that ID completed by `stop` (a ledger completes no other way): it takes
    no message, and a with-start (`enqueue`, `signal_enqueue`) is refused unless called with
    `new=True`, which starts a new, empty ledger under the ID: it knows none of the stopped
    one's operations, requests or IDs. `type` is "LedgerStopped". `final_result` reads what
    the stopped one completed with, its `unknown` requests included."""

    type = "LedgerStopped"

    @property
    def closed(self) -> str:
        """`ledger doc-7 is stopped (its last run completed by stop)`."""
        return f"{summary_for(self.workflow_id)} is stopped (its last run completed by stop)"

    def sentence(self, new_argument: str) -> str:
        if not self.start_refused:
            return self.closed
        ledger_id = self.workflow_id.removeprefix("ledger:")
        return (
            f"{self.closed}: enqueue refused, nothing was created; {new_argument} starts a "
            f"new, empty ledger under ID {ledger_id!r}, without the stopped one's operations, "
            "requests or IDs (reconcile its unknown requests first: docs/contract.md, stop)"
        )


def closed_error(
    workflow_id: str, status: str, reason: str | None, *, start_refused: bool = False
) -> ClosedError:
    """The ClosedError for a closed workflow: `LedgerStopped` for a ledger that completed."""
    if workflow_id.startswith("ledger:") and status == "completed":
        return LedgerStopped(workflow_id, status, reason, start_refused=start_refused)
    return ClosedError(workflow_id, status, reason, start_refused=start_refused)


class UnansweredError(DurabilityError, TimeoutError):
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


def summary_for(workflow_id: str) -> str:
    """The UI summary of a workflow started by this client: "schedule acct-42"."""
    kind, _, business_id = workflow_id.partition(":")
    return f"{kind} {business_id}"


def set_payload(
    expression: str,
    version: int,
    jitter_ms: int | None = None,
    jitter_max_ms: int | None = None,
    params: Any = None,
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
        # Anything but an object is sent as it is, for the workflow's rules to refuse by name.
        payload["params"] = dict(params) if isinstance(params, Mapping) else params
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


def _now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


# -- the workflows' own rules, applied before anything is sent ----------------------------
#
# A with-start whose message or start input the workflow refuses would still create the
# workflow, and a signal it refuses is dropped unseen: both are checked here first, with the
# parse functions the workflows themselves run. Plain updates are left to the workflow's
# validator, which refuses them without recording anything.


def _start_input(
    key: str, business_id: str, options: Any, internal: str, workflow_id: str, kind: str
) -> dict[str, Any]:
    """`options` as a start input: a JSON object without the workflow's `internal` field (the
    state a continue-as-new carries)."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        _start_refused(
            workflow_id, kind, f"the start options must be a JSON object, got {options!r:.200}"
        )
    if internal in options:
        _start_refused(
            workflow_id,
            kind,
            f"{internal} is internal: the state a run carries across continue-as-new",
        )
    return {key: business_id, **options}


def _start_refused(
    workflow_id: str, former: str, error: str | None, coerced: str | None = None
) -> None:
    """A new run fails on a start input with an `error`, or one only a lax reading accepts
    (`coerced`: an unknown field, a value of another JSON type)."""
    problem = error or coerced
    if problem is not None:
        raise RejectedError(
            problem, update="start", workflow_id=workflow_id, type=INVALID_START_INPUT,
            former_type=former,
        )  # fmt: skip


def schedule_start_input(object_id: str, options: Any = None) -> dict[str, Any]:
    """The schedule's start input for `options`; RejectedError (`InvalidStartInput`) naming
    the field when a new schedule would fail on it."""
    from workflows.schedule import core as schedule_core

    workflow_id = schedule_workflow_id(object_id)
    kind = "InvalidScheduleInput"
    start_input = _start_input("object_id", object_id, options, "carried", workflow_id, kind)
    start = schedule_core.parse_start(lambda: start_input, workflow_id)
    _start_refused(workflow_id, kind, start.error, start.coerced)
    return start_input


def ledger_start_input(ledger_id: str, options: Any = None) -> dict[str, Any]:
    """The ledger's start input for `options`; RejectedError (`InvalidStartInput`) naming the
    field when a new ledger would fail on it."""
    from workflows.ledger import core as ledger_core

    workflow_id = ledger_workflow_id(ledger_id)
    kind = "InvalidLedgerInput"
    start_input = _start_input("ledger_id", ledger_id, options, "carried_state", workflow_id, kind)
    start = ledger_core.read_start(lambda: start_input, workflow_id)
    _start_refused(workflow_id, kind, start.error, start.coerced)
    return start_input


def _checked(workflow_id: str, message: str, check: Callable[[], object]) -> None:
    """Run one of the workflows' parse functions; its refusal becomes a RejectedError."""
    try:
        check()
    except ValueError as error:  # InvalidRequest and its kinds: ValueErrors naming the field
        kind = type(error).__name__ if isinstance(error, InvalidRequest) else "InvalidRequest"
        raise RejectedError(
            str(error), update=message, workflow_id=workflow_id, type=kind
        ) from None


def _check_cancel(payload: Any) -> object:
    from workflows.schedule import core as schedule_core

    return schedule_core.parse_cancel(payload)


def _check_pause(payload: Any) -> object:
    from workflows.schedule import core as schedule_core

    return schedule_core.parse_pause(payload)


def _check_describe(payload: Any) -> object:
    from workflows.schedule import core as schedule_core

    return schedule_core.parse_describe(payload)


def _check_release(payload: Any) -> object:
    from workflows.ledger import core as ledger_core

    return ledger_core.parse_release(payload)


def _check_snapshot(page: Any) -> object:
    from workflows.ledger import core as ledger_core

    return ledger_core.parse_snapshot_query(page)


def _check_stop(payload: Any) -> object:
    from workflows.ledger import core

    return core.parse_stop(payload)


def _check_skip(raw: Any) -> object:
    """The ledger's validation of a skip input, refused as the ledger refuses it."""
    from pydantic import ValidationError

    from workflows.ledger.models import SkipInput

    try:
        return SkipInput.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("skip input", error)) from None


def _check_configure(kind: str, changes: Any, current: Mapping[str, Any]) -> object:
    """`configure` of `changes` as the workflow checks it, on its `current` settings."""
    if kind == "schedule":
        from workflows.schedule import core as schedule_core
        from workflows.schedule.models import ScheduleInput

        return schedule_core.parse_configure(changes, ScheduleInput.model_validate(current))
    from workflows.ledger import core as ledger_core
    from workflows.ledger.models import LedgerConfig

    return ledger_core.parse_configure(changes, LedgerConfig.model_validate(current))


@dataclass(frozen=True)
class _WithStart:
    """A message to a schedule or ledger that starts the workflow if none runs: its update
    (update-with-start) or signal (signal-with-start) variant sends the same thing."""

    workflow_type: str
    workflow_id: str
    start_input: dict[str, Any]
    message: str
    payload: Any


def preview_schedule(
    expression: str,
    *,
    after_ms: int | None = None,
    count: int = 10,
    jitter_ms: int = 0,
    dst_policy: Mapping[str, Any] | None = None,
    next_occurrence: NextOccurrence | None = None,
) -> list[int]:
    """The next `count` fire times (epoch ms) of a schedule set to `expression` at
    `after_ms` (default now) with a fixed `jitter_ms` and a `dst_policy` (the start field):
    computed by the code the schedule runs, creating nothing. ValueError (InvalidRequest)
    naming the field as `set` (or a start input) refuses."""
    from workflows.schedule import preview
    from workflows.schedule.models import ScheduleInput
    from workflows.validation import configured

    start = _now_ms() if after_ms is None else after_ms
    settings = None
    if dst_policy is not None:
        raw = {"dst_policy": dict(dst_policy) if isinstance(dst_policy, Mapping) else dst_policy}
        settings = configured("preview", ScheduleInput(), raw, {})
    return preview.next_times(
        expression,
        start,
        count,
        jitter_ms=jitter_ms,
        settings=settings,
        next_occurrence=next_occurrence,
    )


def _set_message(
    object_id: str,
    expression: str,
    version: int,
    jitter_ms: int | None,
    jitter_max_ms: int | None,
    params: Any,
    options: Any,
    next_occurrence: NextOccurrence | None,
) -> _WithStart:
    """What `set_schedule` and `signal_set_schedule` send (`options` is the start input),
    checked as the workflow checks it (with the built-in cron reading unless
    `next_occurrence` is given)."""
    from workflows.schedule import cron, set_rules

    reading = next_occurrence or cron.next_occurrence
    start_input = schedule_start_input(object_id, options)
    payload = set_payload(expression, version, jitter_ms, jitter_max_ms, params)
    workflow_id = schedule_workflow_id(object_id)
    builtin = next_occurrence is None
    _checked(
        workflow_id,
        "set",
        lambda: set_rules.parse_new_set(payload, reading, _now_ms(), builtin=builtin),
    )
    return _WithStart(SCHEDULE_WORKFLOW, workflow_id, start_input, "set", payload)


def _enqueue_message(ledger_id: str, operations: Any, options: Any) -> _WithStart:
    """What `enqueue` and `signal_enqueue` send (`options` is the start input), checked as a
    new ledger checks it (a running one also refuses a cycle through its own operations)."""
    from workflows.ledger import core as ledger_core
    from workflows.ledger.models import LedgerState

    start_input = ledger_start_input(ledger_id, options)
    if isinstance(operations, Sequence) and not isinstance(operations, str):
        operations = [dict(op) if isinstance(op, Mapping) else op for op in operations]
    payload = {"operations": operations}
    workflow_id = ledger_workflow_id(ledger_id)
    empty = LedgerState(ledger_id=ledger_id)
    _checked(workflow_id, "enqueue", lambda: ledger_core.validate_enqueue(empty, payload))
    return _WithStart(LEDGER_WORKFLOW, workflow_id, start_input, "enqueue", payload)


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


async def _listed_memo(
    execution: WorkflowExecution, workflow_type: str
) -> tuple[str | None, dict[str, int] | None]:
    """A listed schedule's state, or a listed ledger's counts, from its memo (None when it
    holds none, or holds something this client does not read)."""
    with suppress(Exception):  # a memo that does not decode (e.g. another key ring)
        if workflow_type == SCHEDULE_WORKFLOW:
            published = await execution.memo_value(search_attributes.SCHEDULE_STATE_MEMO_KEY, None)
            state = published.get("state") if isinstance(published, dict) else None
            return (state if isinstance(state, str) else None), None
        status = await execution.memo_value(search_attributes.STATUS_MEMO_KEY, None)
        if isinstance(status, dict):
            counts = {k: v for k, v in status.items() if isinstance(v, int)}
            return None, counts
    return None, None


# -- bulk: one message to every schedule a visibility query matches -----------------------

# The messages a batch operation can send (Temporal batches only signals): each is a signal
# of the schedule's too.
BULK_MESSAGES = ("pause", "unpause", "cancel", "configure")
# How many of the matching schedules' IDs `match_schedules` lists with the count.
BULK_SAMPLE = 20
# The bounds of what a bulk call sends (the query is the caller's part of it).
MAX_BULK_QUERY_CHARS = 4096
MAX_BULK_REASON_CHARS = 1000
# How long `wait_bulk_job` waits for a job by default, and how often it asks.
BULK_WAIT = timedelta(minutes=2)
BULK_POLL_S = (0.2, 1.0)

_BATCH_STATES = {
    BatchOperationState.BATCH_OPERATION_STATE_RUNNING: "running",
    BatchOperationState.BATCH_OPERATION_STATE_COMPLETED: "completed",
    BatchOperationState.BATCH_OPERATION_STATE_FAILED: "failed",
}


class InvalidQueryError(DurabilityError, ValueError):
    """A bulk call's visibility query was refused, by this client or by Temporal; nothing was
    sent. `query` is the caller's query, `reason` why."""

    def __init__(self, query: str, reason: str) -> None:
        super().__init__(f"query {query!r:.300} refused: {reason}")
        self.query = query
        self.reason = reason


class BatchBusyError(DurabilityError):
    """Temporal refused to start the batch job: the namespace already runs as many as it
    allows (`frontend.MaxConcurrentBatchOperationPerNamespace`, 1 by default). Nothing was
    sent; start it again once the running job has closed (`temporal batch list`)."""


@dataclass(frozen=True)
class ScheduleMatches:
    """The running schedules a visibility query matches now (`match_schedules`)."""

    # The query as sent: the caller's, scoped to running `DurabilitySchedule` workflows.
    query: str
    count: int
    # Up to BULK_SAMPLE of their object IDs, newest first.
    object_ids: list[str]


@dataclass(frozen=True)
class BulkJob:
    """A batch job as Temporal describes it (`temporal batch describe --job-id`)."""

    job_id: str
    # `running`, `completed` or `failed` (the job itself, not its signals).
    state: str
    # Schedules the job found (when it ran: not necessarily the count taken before),
    # signals delivered, signals that failed (e.g. a schedule that closed meanwhile).
    matched: int
    completed: int
    failed: int
    reason: str
    query: str


def schedule_query(query: str) -> str:
    """`query` scoped to running schedules: `WorkflowType = 'DurabilitySchedule' AND
    ExecutionStatus = 'Running' AND (<query>)`. InvalidQueryError when it is empty, longer
    than MAX_BULK_QUERY_CHARS, or could reach past the scope: a `)` that closes the scope's
    parenthesis, an unclosed `(` or quote, or a comment (`/* */`, `--`, `#`), which the
    server skips, parentheses in it included."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidQueryError(str(query), "it must be a non-empty visibility query")
    if len(query) > MAX_BULK_QUERY_CHARS:
        raise InvalidQueryError(
            query, f"it is {len(query)} characters, more than {MAX_BULK_QUERY_CHARS}"
        )
    outside_scope = _reaches_past_scope(query)
    if outside_scope is not None:
        raise InvalidQueryError(query, outside_scope)
    return f"WorkflowType = '{SCHEDULE_WORKFLOW}' AND ExecutionStatus = 'Running' AND ({query})"


# What opens a comment in Temporal's visibility SQL.
_COMMENTS = ("/*", "--", "#")


def _reaches_past_scope(query: str) -> str | None:
    """Why `query`, put inside `( )`, could reach past them, or None: read as the server's
    tokenizer reads it, quoted literals aside ('...' and "..." with backslash escapes,
    `...` without)."""
    depth, quote, escaped = 0, "", False
    for position, char in enumerate(query):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote != "`":  # a `name` has no backslash escapes
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"`":
            quote = char
        elif query.startswith(_COMMENTS, position):
            return "comments are not allowed (outside quotes)"
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return "a ')' closes more than it opened (outside quotes)"
    if quote:
        return f"a {quote} quote is not closed"
    if depth:
        return "a '(' is not closed (outside quotes)"
    return None


def bulk_payload(
    message: str,
    *,
    version: int | None = None,
    changes: Mapping[str, Any] | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """The signal payload a bulk `message` sends, checked as the schedule checks it (a signal
    it refuses is dropped): `{}`, pause's `{"note": str}`, cancel's `{"version": n}`, or
    configure's `changes` (a partial start input, checked on the default settings: each
    schedule checks it again on its own, and drops it if its own settings make it refuse)."""
    if message not in BULK_MESSAGES:
        raise ValueError(f"message must be one of {', '.join(BULK_MESSAGES)}, got {message!r}")
    if version is not None and message != "cancel":
        raise ValueError(f"version is cancel's only, got version={version!r} for {message}")
    if note is not None and message != "pause":
        raise ValueError(f"note is pause's only, got note={note!r:.200} for {message}")
    if (changes is None) != (message != "configure"):
        raise ValueError(f"changes are configure's and only configure's, got {changes!r:.200}")
    if note is not None:
        payload = {"note": note}
        _check_pause(payload)  # InvalidRequest naming pause.note
        return payload
    if message == "cancel":
        payload = _cancel_payload(version)
        _check_cancel(payload)  # InvalidRequest naming cancel.version
        return payload
    if changes is not None:
        from workflows.schedule.models import ScheduleInput

        payload = dict(changes) if isinstance(changes, Mapping) else changes
        _check_configure("schedule", payload, ScheduleInput().model_dump(mode="json"))
        return payload
    return {}


def bulk_reason(reason: str) -> str:
    """`reason` as a batch job records it: a non-empty text of at most MAX_BULK_REASON_CHARS."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"reason must be a non-empty text, got {reason!r}")
    if len(reason) > MAX_BULK_REASON_CHARS:
        raise ValueError(
            f"reason must be at most {MAX_BULK_REASON_CHARS} characters, got {len(reason)}"
        )
    return reason


def _refused_query(query: str, error: RPCError) -> Exception:
    """What a bulk call raises for Temporal's refusal `error` of its visibility query."""
    if error.status == RPCStatusCode.INVALID_ARGUMENT:
        return InvalidQueryError(query, f"Temporal says: {error.message}")
    return error


# How long `DurabilityClient.close` lets the SDK's threads finish releasing the connection.
CLOSE_GRACE_S = 0.1


class Connecting:
    """What `DurabilityClient.connect` returns: await it for a client, or `async with` it for
    one that is closed on exit."""

    def __init__(self, connect: Callable[[], Awaitable[DurabilityClient]]) -> None:
        self._connect = connect
        self._client: DurabilityClient | None = None

    def __await__(self) -> Generator[Any, None, DurabilityClient]:
        return self._connect().__await__()

    async def __aenter__(self) -> DurabilityClient:
        self._client = await self._connect()
        return self._client

    async def __aexit__(self, *_exc: object) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


@dataclass
class Sent:
    """A change this client sent (`DurabilityClient.sent`): `what` ("the set update to
    schedule acct-42"), whether Temporal `answered` it, and what that `means` once answered
    ("schedule acct-42 is closing"), for a caller interrupted meanwhile to say."""

    what: str
    answered: bool = False
    means: str | None = None


class DurabilityClient:
    """Schedules and ledgers by business ID: `acct-42`, not `schedule:acct-42`.

    Only `set_schedule` and `enqueue` (and their signal variants) create a workflow; every
    other call on an ID with no workflow raises NotFoundError, and on a closed one
    ClosedError. Input is checked with the workflows' own rules before it is sent.
    """

    def __init__(
        self,
        client: Client,
        task_queue_name: str | None = None,
        *,
        update_timeout: timedelta | None = UPDATE_TIMEOUT,
        next_occurrence: NextOccurrence | None = None,
        worker_grace: timedelta | None = WORKER_GRACE,
    ) -> None:
        """`update_timeout` bounds each update call (`UnansweredError`); None waits forever.
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
        # The changes this client sent, oldest first (a caller interrupted mid-call says
        # what was already sent).
        self.sent: list[Sent] = []
        self._polled_queues: set[str] = set()
        self._workflow_queues: dict[str, str] = {}

    @classmethod
    def connect(cls, task_queue_name: str | None = None, *, tracing: bool = True) -> Connecting:
        """Connect with Temporal's environment configuration and the product's converter
        (`durability.connect.connect_client`); `tracing=False` leaves OpenTelemetry's
        interceptor out. Await it for a client, or use it as an async context manager,
        which closes the client on exit (`close`):

            async with DurabilityClient.connect() as client:
                await client.set_schedule("acct-42", "@hourly", version=1)
        """

        async def connecting() -> DurabilityClient:
            return cls(await connect_client(tracing=tracing), task_queue_name)

        return Connecting(connecting)

    async def close(self) -> None:
        """Let go of the Temporal connection before the interpreter exits.

        The SDK has no way to close a client (temporalio/sdk-python#300): its Rust threads
        can still be releasing the connection while a short script's interpreter finalizes,
        which aborts the process (`Fatal Python error: PyGILState_Release`) after its work
        is done. This drops the client's reference to the connection, collects it and gives
        those threads a moment, while the interpreter still runs: it makes that abort rare,
        not impossible (docs/python-api.md has the figures). The client is unusable
        afterwards; a `Client` the caller passed in and still holds stays open.
        """
        self.__dict__.pop("temporal", None)
        gc.collect()
        await asyncio.sleep(CLOSE_GRACE_S)

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

    async def _check_with_start(self, sent: _WithStart) -> None:
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
        return "stopped" if handle.id.startswith("ledger:") else None

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
        self, sent: _WithStart, result_type: type | None = None, *, new: bool = False
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

    async def _signal_with_start(self, sent: _WithStart, *, new: bool = False) -> None:
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
        query the worker fails (a payload it cannot decode) raises WorkflowQueryFailedError."""
        for arg in args:
            await self._check_size(workflow_id, query, arg, MAX_MESSAGE_BYTES)
        await self._require_worker_of(workflow_id, f"the {query} query was not sent")
        handle = self.temporal.get_workflow_handle(workflow_id)

        async def ask() -> Any:
            return await handle.query(query, *args, reject_condition=QueryRejectCondition.NOT_OPEN)

        try:
            return await self._answer(workflow_id, query, ask)
        except WorkflowQueryRejectedError as error:
            status = CLOSED_STATUS.get(error.status) if error.status else None
            raise closed_error(
                workflow_id, status or "closed", await self._close_reason(handle)
            ) from error

    # -- schedule ----------------------------------------------------------------------

    def schedule_handle(self, object_id: str) -> WorkflowHandle[Any, Any]:
        return self.temporal.get_workflow_handle(schedule_workflow_id(object_id))

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
        new: bool = False,
    ) -> bool:
        """Set (update-with-start); returns `applied`. `options` is the start input, read
        only when this call starts the schedule. `new` starts a new schedule under a closed
        ID (without its versions and dead letters); without it a closed ID is refused."""
        sent = _set_message(
            object_id, expression, version, jitter_ms, jitter_max_ms, params, options,
            self.next_occurrence,
        )  # fmt: skip
        return bool(await self._update_with_start(sent, bool, new=new))

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
        new: bool = False,
    ) -> None:
        """Set by signal-with-start: fire and forget, once checked as the workflow checks it
        (a signal it refuses would be dropped unseen)."""
        sent = _set_message(
            object_id, expression, version, jitter_ms, jitter_max_ms, params, options,
            self.next_occurrence,
        )  # fmt: skip
        await self._signal_with_start(sent, new=new)

    async def cancel_schedule(self, object_id: str, version: int | None = None) -> bool:
        """Cancel future ticks; returns whether a schedule was live. Creates nothing: an ID
        with no schedule raises NotFoundError."""
        workflow_id = schedule_workflow_id(object_id)
        payload = _cancel_payload(version)
        _checked(workflow_id, "cancel", lambda: _check_cancel(payload))
        return bool(await self._update(workflow_id, "cancel", payload, bool))

    async def close_schedule(self, object_id: str, *, wait: bool = False) -> None:
        """End the schedule workflow for good (Temporal's cancellation request): it starts no
        run from now on and closes as cancelled once every run it started has reported, its
        outcome delivered (docs/contract.md 6.3). With `wait`, return once it has closed. An
        ID with no schedule raises NotFoundError, a closed one ClosedError."""
        workflow_id = schedule_workflow_id(object_id)
        why = await self._closed_or_missing(workflow_id)
        if why is not None:
            raise why
        if wait:
            await self._require_worker_of(
                workflow_id,
                "the close was not sent, as waiting for it would never end (without waiting "
                "it is sent, and taken once a worker polls)",
            )
        handle = self.temporal.get_workflow_handle(workflow_id)
        await self._sending(
            f"the close of {summary_for(workflow_id)}",
            handle.cancel(),
            means=f"{summary_for(workflow_id)} is closing: it starts no run and closes once "
            "the runs it started have reported",
        )
        if wait:
            with contextlib.suppress(WorkflowFailureError):  # it ends cancelled: that is done
                await handle.result()

    async def signal_cancel_schedule(self, object_id: str, version: int | None = None) -> None:
        workflow_id = schedule_workflow_id(object_id)
        payload = _cancel_payload(version)
        _checked(workflow_id, "cancel", lambda: _check_cancel(payload))
        await self._signal(workflow_id, "cancel", payload)

    async def pause_schedule(self, object_id: str, note: str | None = None) -> bool:
        """Stop ticks until unpaused, with an optional `note` saying why (it replaces the
        note of a schedule already paused); returns whether it was running (False: already
        paused). Versions are untouched."""
        workflow_id = schedule_workflow_id(object_id)
        payload: dict[str, Any] = {} if note is None else {"note": note}
        _checked(workflow_id, "pause", lambda: _check_pause(payload))
        return bool(await self._update(workflow_id, "pause", payload, bool))

    async def pause_note(self, object_id: str) -> str | None:
        """Why the schedule is paused (the `pause` note, or the failed run that paused it
        under `pause_on_failure`), or None."""
        note: str | None = await self._query(schedule_workflow_id(object_id), "pause_note")
        return note

    async def unpause_schedule(self, object_id: str) -> bool:
        """Tick again from now (ticks missed while paused are skipped); returns whether it
        was paused."""
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

    async def _checked_configure(
        self, kind: str, workflow_id: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The `configure` payload, checked on the workflow's own settings (its `settings`
        query: an ID with no workflow raises NotFoundError, and nothing is created)."""
        current: dict[str, Any] = await self._query(workflow_id, "settings")
        _checked(workflow_id, "configure", lambda: _check_configure(kind, changes, current))
        return dict(changes)

    async def configure_schedule(
        self, object_id: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Change start settings of a running schedule in place (docs/contract.md 2.2), e.g.
        `{"max_concurrent_runs": 3}`; returns the settings now in effect. Runs started
        before keep theirs. Checked first as the schedule checks it (RejectedError)."""
        workflow_id = schedule_workflow_id(object_id)
        payload = await self._checked_configure("schedule", workflow_id, changes)
        result: dict[str, Any] = await self._update(workflow_id, "configure", payload, dict)
        return result

    async def signal_configure_schedule(self, object_id: str, changes: Mapping[str, Any]) -> None:
        """`configure` by signal (as bulk operations send it), checked first on the
        schedule's current settings: a signal it refuses would be dropped unseen."""
        workflow_id = schedule_workflow_id(object_id)
        payload = await self._checked_configure("schedule", workflow_id, changes)
        await self._signal(workflow_id, "configure", payload)

    async def schedule_settings(self, object_id: str) -> dict[str, Any]:
        """The schedule's start settings in effect (the `settings` query)."""
        result: dict[str, Any] = await self._query(schedule_workflow_id(object_id), "settings")
        return result

    async def preview_set_schedule(
        self,
        object_id: str,
        expression: str,
        version: int,
        *,
        jitter_ms: int | None = None,
        jitter_max_ms: int | None = None,
        params: Mapping[str, Any] | None = None,
        count: int = 10,
    ) -> dict[str, Any]:
        """What `set_schedule` would do to the running schedule, sending nothing (it reads
        the schedule with queries): `before` and `after` (its next `count` fire times, epoch
        ms), `applied` and `changes` (`{field: [before, after]}`). RejectedError as the `set`
        would be refused."""
        from workflows.schedule import preview

        payload = set_payload(expression, version, jitter_ms, jitter_max_ms, params)
        return await self._preview(
            object_id,
            "set",
            lambda current, paused, settings: preview.set_preview(
                current, paused, settings, payload, _now_ms(), count
            ),
        )

    async def preview_configure_schedule(
        self, object_id: str, changes: Mapping[str, Any], *, count: int = 10
    ) -> dict[str, Any]:
        """What `configure_schedule` would do, sending nothing: `before` and `after` fire
        times and `changes` (`{setting: [before, after]}`). RejectedError as it would be."""
        from workflows.schedule import preview

        return await self._preview(
            object_id,
            "configure",
            lambda current, paused, settings: preview.configure_preview(
                current, paused, settings, changes, _now_ms(), count
            ),
        )

    async def _preview(
        self,
        object_id: str,
        message: str,
        compute: Callable[[dict[str, Any] | None, bool, dict[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        """Read the running schedule (`get`, `paused`, `settings`) and compute what `message`
        would do to it, refused as the message would be; nothing is sent."""
        workflow_id = schedule_workflow_id(object_id)
        current: dict[str, Any] | None = await self._query(workflow_id, "get")
        paused = bool(await self._query(workflow_id, "paused"))
        settings: dict[str, Any] = await self._query(workflow_id, "settings")
        result: dict[str, Any] = {}
        _checked(workflow_id, message, lambda: result.update(compute(current, paused, settings)))
        return result

    async def get_schedule(self, object_id: str) -> ScheduleView | None:
        """The live schedule with whether it is `paused`, or None (none set, or cancelled)."""
        workflow_id = schedule_workflow_id(object_id)
        view: dict[str, Any] | None = await self._query(workflow_id, "get")
        if view is None:
            return None
        paused = bool(await self._query(workflow_id, "paused"))
        note = await self._query(workflow_id, "pause_note") if paused else None
        return ScheduleView(**{**view, "paused": paused, "pause_note": note})  # type: ignore[typeddict-item]

    async def stored_version(self, object_id: str) -> int | None:
        """The version stored for `object_id`, a cancel tombstone's included, as the schedule
        publishes it (`DurabilityScheduleVersion`); None while none was ever set. With
        `get_schedule` returning None it tells a cancelled schedule from one never set."""
        workflow_id = schedule_workflow_id(object_id)
        handle = self.temporal.get_workflow_handle(workflow_id)
        description = await self._answer(workflow_id, "describe", handle.describe)
        version: int | None = description.typed_search_attributes.get(
            search_attributes.SCHEDULE_VERSION
        )
        return version

    async def describe(
        self, object_id: str, *, runs: int | None = None, next_times: int | None = None
    ) -> dict[str, Any]:
        """The `describe` query: the live schedule (as `get`, or None), `paused`, the last
        `runs` runs that ended (newest first, 0..10, default 10), the next `next_times` fire
        times (0..50, default 10), the counters since 0.1.1 and `dropped_signals` (signals
        the schedule refused and dropped)."""
        workflow_id = schedule_workflow_id(object_id)
        sizes = {
            key: value for key, value in (("runs", runs), ("next", next_times)) if value is not None
        }
        _checked(workflow_id, "describe", lambda: _check_describe(sizes))
        args = (sizes,) if sizes else ()
        described: dict[str, Any] = await self._query(workflow_id, "describe", *args)
        if "dropped_signals" not in described:
            # Counted by the schedule and answered by a query of its own.
            with suppress(WorkflowQueryFailedError):
                described["dropped_signals"] = await self._query(workflow_id, "dropped_signals")
        return described

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
            state, counts = await _listed_memo(execution, workflow_type)
            found.append(
                Listed(
                    id=execution.id.removeprefix(prefix),
                    workflow_id=execution.id,
                    status=execution.status.name if execution.status else "UNKNOWN",
                    started_at=int(execution.start_time.timestamp() * 1000),
                    version=attributes.get(search_attributes.SCHEDULE_VERSION),
                    next_tick_at=None if next_tick is None else int(next_tick.timestamp() * 1000),
                    state=state,
                    counts=counts,
                )
            )
        return found

    # -- ledger ------------------------------------------------------------------------

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
        new: bool = False,
    ) -> EnqueueResult:
        """Enqueue (update-with-start); returns accepted, duplicate and conflicting IDs once
        recorded. `options` is the start input, read only when this call starts the ledger.
        `new` starts a new ledger under a closed (stopped) ID; without it a closed ID is
        refused."""
        result: EnqueueResult = await self._update_with_start(
            _enqueue_message(ledger_id, operations, options), new=new
        )
        return result

    async def signal_enqueue(
        self,
        ledger_id: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        new: bool = False,
    ) -> None:
        """Enqueue by signal-with-start: fire and forget, once checked as a new ledger checks
        it (a signal it refuses would be dropped unseen)."""
        await self._signal_with_start(_enqueue_message(ledger_id, operations, options), new=new)

    async def hold(self, ledger_id: str, token: str | None = None) -> str:
        """Stop new launches until the returned token is released. With `token` (your own),
        holding it again changes nothing: safe to send again when an answer was lost."""
        payload = {} if token is None else {"token": token}
        held: str = await self._update(ledger_workflow_id(ledger_id), "hold", payload, str)
        return held

    async def release(self, ledger_id: str, token: str) -> bool:
        """Release a held token; returns True (a token not held is refused)."""
        workflow_id = ledger_workflow_id(ledger_id)
        payload = {"token": token}
        _checked(workflow_id, "release", lambda: _check_release(payload))
        return bool(await self._update(workflow_id, "release", payload))

    async def signal_release(self, ledger_id: str, token: str) -> None:
        workflow_id = ledger_workflow_id(ledger_id)
        payload = {"token": token}
        _checked(workflow_id, "release", lambda: _check_release(payload))
        await self._signal(workflow_id, "release", payload)

    async def settle(self, ledger_id: str) -> dict[str, Any]:
        """Wait until no attempt is in progress (compile, submit, query); returns whether the
        ledger is held, how many requests wait for their retry, and the snapshot's counts.
        Take a `hold` first for a quiet that lasts (nothing is launched while held)."""
        result: dict[str, Any] = await self._update(
            ledger_workflow_id(ledger_id), "settle", {}, dict
        )
        return result

    async def resume(self, ledger_id: str) -> list[str]:
        """Retry unresolved and blocked requests; returns the IDs of the operations resumed."""
        result: dict[str, list[str]] = await self._update(
            ledger_workflow_id(ledger_id), "resume", {}
        )
        return list(result.get("resumed", []))

    async def signal_resume(self, ledger_id: str) -> None:
        await self._signal(ledger_workflow_id(ledger_id), "resume", {})

    async def skip(self, ledger_id: str, operation_id: str, reason: str | None = None) -> bool:
        """Resolve a stuck (pending or blocked, not in flight) operation as `skipped`.

        Its dependents then proceed. Rejected for an unknown, resolved or in-flight
        operation; `reason` (default "skipped" on the workflow side) becomes its error.
        """
        workflow_id = ledger_workflow_id(ledger_id)
        payload = skip_payload(operation_id, reason)
        _checked(workflow_id, "skip", lambda: _check_skip(payload))
        return bool(await self._update(workflow_id, "skip", payload, bool))

    async def signal_skip(
        self, ledger_id: str, operation_id: str, reason: str | None = None
    ) -> None:
        workflow_id = ledger_workflow_id(ledger_id)
        payload = skip_payload(operation_id, reason)
        _checked(workflow_id, "skip", lambda: _check_skip(payload))
        await self._signal(workflow_id, "skip", payload)

    async def stop(
        self,
        ledger_id: str,
        *,
        query_limit: int | None = None,
        query_deadline_ms: int | None = None,
    ) -> dict[str, Any]:
        """Stop dispatching, cancel in-flight requests, ask the far side once about each
        request it may have received; returns the final result: the final snapshot with
        `resolved_at_stop` (what those queries resolved) and `unknown` (what stays unknown,
        each with its frozen body; see `unknown_requests`). The ledger then completes: its
        ID takes a new ledger only with `enqueue(..., new=True)`; another `stop` raises
        LedgerStopped. `query_limit` (0..100, default 100) and `query_deadline_ms`
        (0..60000, default 60000) bound the asking; 0 asks none."""
        workflow_id = ledger_workflow_id(ledger_id)
        bound = (("query_limit", query_limit), ("query_deadline_ms", query_deadline_ms))
        payload = {key: value for key, value in bound if value is not None}
        _checked(workflow_id, "stop", lambda: _check_stop(payload))
        result: dict[str, Any] = await self._update(workflow_id, "stop", payload)
        return result

    async def final_result(self, ledger_id: str) -> dict[str, Any]:
        """What a stopped ledger completed with (the result `stop` returned), read again:
        its `unknown` requests are what a user reconciles with the far side. A running
        ledger raises RejectedError (type "LedgerRunning"); no ledger, NotFoundError; a
        failed or terminated one, ClosedError."""
        workflow_id = ledger_workflow_id(ledger_id)
        why = await self._closed_or_missing(workflow_id)
        if why is None:
            raise RejectedError(
                f"{summary_for(workflow_id)} is running: it has a final result once stopped",
                update="final_result", workflow_id=workflow_id, type="LedgerRunning",
            )  # fmt: skip
        if not isinstance(why, LedgerStopped):
            raise why
        handle = self.temporal.get_workflow_handle(workflow_id)
        result: dict[str, Any] = await handle.result(follow_runs=False)
        return result

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
        workflow_id = ledger_workflow_id(ledger_id)
        page = {
            key: value
            for key, value in (("phase", phase), ("after", after), ("limit", limit))
            if value is not None
        }
        _checked(workflow_id, "snapshot", lambda: _check_snapshot(page))
        args = (page,) if page else ()
        result: dict[str, Any] = await self._query(workflow_id, "snapshot", *args)
        return result

    async def configure_ledger(self, ledger_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Change start settings of a running ledger in place (docs/contract.md 3.3), e.g.
        `{"concurrency": 4}`; returns the settings now in effect. Requests started before
        keep theirs. Checked first as the ledger checks it (RejectedError)."""
        workflow_id = ledger_workflow_id(ledger_id)
        payload = await self._checked_configure("ledger", workflow_id, changes)
        result: dict[str, Any] = await self._update(workflow_id, "configure", payload, dict)
        return result

    async def signal_configure_ledger(self, ledger_id: str, changes: Mapping[str, Any]) -> None:
        """`configure` by signal, checked first on the ledger's current settings."""
        workflow_id = ledger_workflow_id(ledger_id)
        payload = await self._checked_configure("ledger", workflow_id, changes)
        await self._signal(workflow_id, "configure", payload)

    async def ledger_settings(self, ledger_id: str) -> dict[str, Any]:
        """The ledger's start settings in effect (the `settings` query)."""
        result: dict[str, Any] = await self._query(ledger_workflow_id(ledger_id), "settings")
        return result

    async def claims(self, ledger_id: str) -> dict[str, str]:
        result: dict[str, str] = await self._query(ledger_workflow_id(ledger_id), "claims")
        return result

    # -- bulk: one message to every schedule a visibility query matches -------------

    async def match_schedules(self, query: str, *, sample: int = BULK_SAMPLE) -> ScheduleMatches:
        """How many running schedules `query` matches now, and up to `sample` of their
        object IDs; sends nothing. InvalidQueryError when Temporal refuses the query."""
        if not 0 <= sample <= 1000:
            raise ValueError(f"sample must be 0..1000, got {sample}")
        scoped = schedule_query(query)
        try:
            counted = await self.temporal.workflow_service.count_workflow_executions(
                CountWorkflowExecutionsRequest(namespace=self.temporal.namespace, query=scoped)
            )
            listed = self.temporal.list_workflows(scoped, limit=sample) if sample else None
            ids = [found.id.removeprefix("schedule:") async for found in listed] if listed else []
        except RPCError as error:
            raise _refused_query(query, error) from None
        return ScheduleMatches(query=scoped, count=int(counted.count), object_ids=ids)

    async def start_bulk(
        self,
        message: str,
        query: str,
        *,
        reason: str,
        version: int | None = None,
        changes: Mapping[str, Any] | None = None,
        note: str | None = None,
    ) -> str:
        """Start a Temporal batch job sending the `message` signal (`pause` with its optional
        `note`, `unpause`, `cancel` with its optional `version`, or `configure` with its
        `changes`) to every
        running schedule `query` matches when the job runs; returns its job ID (`temporal
        batch describe --job-id`). `reason` is recorded on the job. Checked before anything
        is sent: InvalidQueryError; ValueError (InvalidRequest for the payload) for a bad
        message, version, changes or reason; BatchBusyError while another job runs."""
        scoped = schedule_query(query)
        payload = bulk_payload(message, version=version, changes=changes, note=note)
        reason = bulk_reason(reason)
        job_id = f"durability-schedule-{message}-{uuid.uuid4().hex}"
        encoded = await self.temporal.data_converter.encode([payload])
        if encoded[0].ByteSize() > MAX_MESSAGE_BYTES:
            raise ValueError(
                f"the {message} payload is {encoded[0].ByteSize()} bytes encoded, more than "
                f"the limit of {MAX_MESSAGE_BYTES}"
            )
        request = StartBatchOperationRequest(
            namespace=self.temporal.namespace,
            visibility_query=scoped,
            job_id=job_id,
            reason=reason,
            signal_operation=BatchOperationSignal(
                signal=message,
                input=Payloads(payloads=encoded),
                identity=self.temporal.identity,
            ),
        )
        try:
            await self._sending(
                f"the batch job {job_id} ({message} to every running schedule the query matches)",
                self.temporal.workflow_service.start_batch_operation(request),
                means=f"the job goes on by itself (temporal batch describe --job-id {job_id})",
            )
        except RPCError as error:
            if error.status == RPCStatusCode.RESOURCE_EXHAUSTED:
                raise BatchBusyError(
                    f"Temporal runs no more batch jobs in namespace {self.temporal.namespace} "
                    f"now ({error.message}; frontend.MaxConcurrentBatchOperationPerNamespace, 1 "
                    "by default): nothing was sent; try again once the running job has closed "
                    "(temporal batch list)"
                ) from None
            raise _refused_query(query, error) from None
        return job_id

    async def bulk_job(self, job_id: str) -> BulkJob:
        """The batch job `job_id` as Temporal describes it now."""
        described = await self.temporal.workflow_service.describe_batch_operation(
            DescribeBatchOperationRequest(namespace=self.temporal.namespace, job_id=job_id)
        )
        return BulkJob(
            job_id=described.job_id or job_id,
            state=_BATCH_STATES.get(described.state, "unknown"),
            matched=int(described.total_operation_count),
            completed=int(described.complete_operation_count),
            failed=int(described.failure_operation_count),
            reason=described.reason,
            query=described.query,
        )

    async def wait_bulk_job(self, job_id: str, timeout: timedelta = BULK_WAIT) -> BulkJob:
        """The batch job once it has closed, or as it is after `timeout` (still `running`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout.total_seconds()
        pause, longest = BULK_POLL_S
        while True:
            job = await self.bulk_job(job_id)
            left = deadline - loop.time()
            if job.state != "running" or left <= 0:
                return job
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, longest)


def _reuse_policy(new: bool) -> WorkflowIDReusePolicy:
    """A with-start never silently replaces a closed workflow: `new` asks for it."""
    return WorkflowIDReusePolicy.ALLOW_DUPLICATE if new else WorkflowIDReusePolicy.REJECT_DUPLICATE


def unknown_requests(final: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The requests a stopped ledger's final result lists as unknown: each may have reached
    the far side and is not resolved. `request_id`, `operation_ids`, `request` (the frozen
    body; its `idempotency_key` is what to ask the far side about), `next_action` (`query`),
    `attempt`, `last_status`, `at_stop` (what the stop's query gave: `accepted`,
    `unresolved`, `blocked`, `no_answer`, or `not_asked`). A final result recorded before
    0.1.1 has none listed: its unresolved requests are in `requests`."""
    return list(final.get("unknown") or [])
