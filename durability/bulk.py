"""Bulk operations: one message to every running schedule a visibility query matches, sent
by a Temporal batch job (Temporal batches only signals, so each is a signal of the schedule's).

`BULK_MESSAGES` is the one list of them: the client's `start_bulk` takes these, and the CLI
gives each its `--query`. This module loads nothing heavy until a call is made (the CLI reads
`BULK_MESSAGES` to build its parser, before it loads the Temporal SDK).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durability.errors import BatchBusyError, InvalidQueryError

if TYPE_CHECKING:
    from temporalio.service import RPCError

    from durability.sending import ClientCore

    _Core = ClientCore
else:
    _Core = object

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
    from workflows.schedule import SCHEDULE_WORKFLOW_TYPE

    return (
        f"WorkflowType = '{SCHEDULE_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' AND ({query})"
    )


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
    from durability import checks

    if note is not None:
        payload = {"note": note}
        checks.parse("schedule.pause", payload)  # InvalidRequest naming pause.note
        return payload
    if message == "cancel":
        payload = checks.cancel_payload(version)
        checks.parse("schedule.cancel", payload)  # InvalidRequest naming cancel.version
        return payload
    if changes is not None:
        from workflows.schedule.models import ScheduleInput

        payload = dict(changes) if isinstance(changes, Mapping) else changes
        checks.check_configure("schedule", payload, ScheduleInput().model_dump(mode="json"))
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
    from temporalio.service import RPCStatusCode

    if error.status == RPCStatusCode.INVALID_ARGUMENT:
        return InvalidQueryError(query, f"Temporal says: {error.message}")
    return error


class BulkClient(_Core):
    """The bulk calls of `DurabilityClient` (see the module)."""

    async def match_schedules(self, query: str, *, sample: int = BULK_SAMPLE) -> ScheduleMatches:
        """How many running schedules `query` matches now, and up to `sample` of their
        object IDs; sends nothing. InvalidQueryError when Temporal refuses the query."""
        if not 0 <= sample <= 1000:
            raise ValueError(f"sample must be 0..1000, got {sample}")
        from temporalio.api.workflowservice.v1 import CountWorkflowExecutionsRequest
        from temporalio.service import RPCError

        from durability.checks import SCHEDULE_ID_PREFIX

        scoped = schedule_query(query)
        try:
            counted = await self.temporal.workflow_service.count_workflow_executions(
                CountWorkflowExecutionsRequest(namespace=self.temporal.namespace, query=scoped)
            )
            listed = self.temporal.list_workflows(scoped, limit=sample) if sample else None
            found = [execution.id async for execution in listed] if listed else []
            ids = [workflow_id.removeprefix(SCHEDULE_ID_PREFIX) for workflow_id in found]
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
        `changes`) to every running schedule `query` matches when the job runs; returns its
        job ID (`temporal batch describe --job-id`). `reason` is recorded on the job. Checked
        before anything is sent: InvalidQueryError; ValueError (InvalidRequest for the
        payload) for a bad message, version, changes or reason; BatchBusyError while another
        job runs."""
        from temporalio.api.batch.v1 import BatchOperationSignal
        from temporalio.api.common.v1 import Payloads
        from temporalio.api.workflowservice.v1 import StartBatchOperationRequest
        from temporalio.service import RPCError, RPCStatusCode

        from durability.sending import MAX_MESSAGE_BYTES

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
        from temporalio.api.enums.v1 import BatchOperationState
        from temporalio.api.workflowservice.v1 import DescribeBatchOperationRequest

        states = {
            BatchOperationState.BATCH_OPERATION_STATE_RUNNING: "running",
            BatchOperationState.BATCH_OPERATION_STATE_COMPLETED: "completed",
            BatchOperationState.BATCH_OPERATION_STATE_FAILED: "failed",
        }
        described = await self.temporal.workflow_service.describe_batch_operation(
            DescribeBatchOperationRequest(namespace=self.temporal.namespace, job_id=job_id)
        )
        return BulkJob(
            job_id=described.job_id or job_id,
            state=states.get(described.state, "unknown"),
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
