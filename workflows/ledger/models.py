"""Wire shapes of the operation ledger (docs/contract.md, section 3) and its carried state.

Field names are the public contract: snake_case, times in epoch ms, durations in `*_ms`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from workflows.limits import ActivityName, BoundedId, TaskQueueName
from workflows.validation import carried

# Input limits: with them and the state budget (workflows.budget) everything the
# ledger carries across continue-as-new stays well under Temporal's 2 MB payload limit.
MAX_ID_LENGTH = 100
MAX_REFERENCES = 64  # participants, and dependencies, of one operation
MAX_PAYLOAD_BYTES = 16 * 1024  # one operation's payload, as JSON
MAX_BATCH_OPERATIONS = 100
MAX_BATCH_BYTES = 128 * 1024  # one enqueue, as JSON


class OperationPhase(StrEnum):
    """Where an operation is (the snapshot's `phase`)."""

    PENDING = "pending"
    DISPATCHED = "dispatched"
    RESOLVED = "resolved"
    BLOCKED = "blocked"


class RequestPhase(StrEnum):
    """Where a frozen request is."""

    FROZEN = "frozen"
    IN_FLIGHT = "in_flight"
    RESOLVED = "resolved"
    BLOCKED = "blocked"


class RequestAction(StrEnum):
    """What a request sends next: its body (`submit`) or a status check (`query`)."""

    SUBMIT = "submit"
    QUERY = "query"


class RequestOutcome(StrEnum):
    """What the far side answered for a request."""

    APPLIED = "applied"
    REJECTED = "rejected"
    ACCEPTED = "accepted"
    UNRESOLVED = "unresolved"


# An enum field of a strict model still takes the enum's value from decoded JSON.
Lenient = Field(strict=False)

MAX_INT32 = 2**31 - 1


class RetryConfig(BaseModel):
    """Backoff between submit/query attempts of one frozen request (L8)."""

    model_config = ConfigDict(extra="forbid")

    initial_interval_ms: int = Field(default=500, ge=1, le=MAX_INT32)
    backoff_coefficient: float = Field(default=2.0, ge=1.0, allow_inf_nan=False)
    maximum_interval_ms: int = Field(default=30_000, ge=1, le=MAX_INT32)


# A new start's and `configure`'s bounds on each of `lanes`.
MIN_LANE = 1
MAX_LANE = 1000


def _default_lanes() -> dict[str, int]:
    return {"asset.upload": 1}


def _default_participant_free() -> list[str]:
    return ["asset.upload", "run.cancel"]


class RetentionConfig(BaseModel):
    """How much of its past a ledger keeps (its carried state stays bounded).

    `resolved_operations`: resolved operations kept whole in the state and the snapshot
    (the oldest by sequence leave first). `remembered_ids`: IDs of resolved operations that
    left, still honoured for duplicate detection and as resolved dependencies; an ID older
    than that is unknown again: enqueued again it is a new operation, and a dependency on
    it waits for an operation with that ID.
    """

    model_config = ConfigDict(extra="forbid")

    resolved_operations: int = Field(default=200, ge=0, le=1000)
    remembered_ids: int = Field(default=5000, ge=0, le=5000)


class LedgerConfig(BaseModel):
    """The settings part of the start input; carried unchanged across continue-as-new."""

    model_config = ConfigDict(extra="forbid")

    ledger_id: str | None = None
    concurrency: int = Field(default=2, ge=1, le=1000)
    # 1..1000 per type for a new start and for `configure`; a lane outside that carried by
    # continue-as-new is kept (a carried state is never refused): that type never dispatches.
    lanes: dict[str, int] = Field(default_factory=_default_lanes)
    participant_free_types: list[str] = Field(default_factory=_default_participant_free)
    supported_protocol_versions: list[int] = Field(default_factory=lambda: [1])
    retry: RetryConfig = Field(default_factory=RetryConfig)
    # Names Temporal accepts in a command (workflows.limits); ledger_id is checked by the
    # workflow, which may take it from the workflow ID.
    compile_activity: ActivityName = "compile"
    submit_activity: ActivityName = "submit"
    query_activity: ActivityName = "query"
    # Called as `(frozen_request, status)` once a submit or query answers applied/rejected,
    # before the request resolves (L9); None: no call.
    complete_activity: ActivityName | None = None
    activity_task_queue: TaskQueueName | None = None
    # Not part of the wire contract: continue-as-new once history reaches this many events
    # (None: when Temporal suggests it, with a safety cap). Tests use a small value; below 20
    # a fresh run could be due before it dispatches anything.
    continue_as_new_after_events: int | None = Field(default=None, ge=20)
    # Not part of the wire contract: run `compile_activity` as a local activity on the ledger's
    # own worker (same timeout and retry policy; `activity_task_queue` is not used for it). It
    # saves an activity task round trip and a ledger workflow task per operation, and the
    # compile result is still recorded (a marker) in the same workflow task completion that
    # starts the request, before anything is sent (L6); a compile error still blocks the
    # operation with its message. Only for workers that register the compile activity
    # themselves (`compile` written in Python and hosted with the ledger): keep it off when
    # compile runs on another task queue or in another SDK.
    local_compile: bool = False
    # Not part of the wire contract (the bench sets it): each request sleeps its own retry
    # timer and keeps its slot while it waits, instead of waiting for the ledger's grant
    # (L4). Left out of the continued run's input while off (a rolling upgrade).
    own_retry_timers: bool = False
    retention: RetentionConfig = Field(default_factory=lambda: RetentionConfig())

    @field_validator("lanes")
    @classmethod
    def _lanes_within_bounds(cls, lanes: dict[str, int], info: ValidationInfo) -> dict[str, int]:
        if carried(info):
            return lanes
        for operation_type, lane in lanes.items():
            if not MIN_LANE <= lane <= MAX_LANE:
                raise ValueError(
                    f"lane of {operation_type!r:.80} must be from {MIN_LANE} to {MAX_LANE}, "
                    f"got {lane}"
                )
        return lanes

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        """The settings in LEFT_OUT_UNSET are written only when set (`core.next_run_input`
        leaves them unset while they have their defaults): during a rolling upgrade a worker
        that does not know them yet refuses a start input with a field it does not know."""
        data = handler(self)
        if isinstance(data, dict):
            for name in LEFT_OUT_UNSET:
                if name not in self.model_fields_set:
                    data.pop(name, None)
        return data


# LedgerConfig fields not written while unset (see `LedgerConfig._leave_out_unset`).
LEFT_OUT_UNSET = ("local_compile", "complete_activity")


class OperationIntent(BaseModel):
    """One operation as the user enqueues it. Strict: wrong types are rejected, not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    operation_type: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    participants: list[Annotated[str, Field(max_length=MAX_ID_LENGTH)]] = Field(
        default_factory=list, max_length=MAX_REFERENCES
    )
    dependencies: list[Annotated[str, Field(max_length=MAX_ID_LENGTH)]] = Field(
        default_factory=list, max_length=MAX_REFERENCES
    )
    payload: JsonValue = None
    protocol_version: int = 1


class EnqueueInput(BaseModel):
    """`enqueue` payload: `{"operations": [intent, ...]}`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    operations: list[OperationIntent] = Field(max_length=MAX_BATCH_OPERATIONS)


class EnqueueResult(BaseModel):
    """`enqueue` update result: each ID of the batch in one list. `duplicates`: known IDs sent
    with the intent recorded for them; `conflicts`: known IDs sent with another intent (see
    `core.intent_conflicts`). Neither changes anything."""

    accepted: list[str]
    duplicates: list[str]
    conflicts: list[str]


class ReleaseInput(BaseModel):
    """`release` payload: `{"token": str}`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    token: str = Field(min_length=1)


class SkipInput(BaseModel):
    """`skip` payload (beyond the rules L1-L14): give up on one operation."""

    model_config = ConfigDict(extra="forbid", strict=True)

    operation_id: str = Field(min_length=1, max_length=MAX_ID_LENGTH)
    reason: str = Field(default="skipped", max_length=500)


class EmptyInput(BaseModel):
    """`resume` / `settle` payload: `{}` (an unknown field is refused, naming it)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class HoldInput(BaseModel):
    """`hold` payload: `{}` for a token the ledger makes up, or `{"token": str}` for the
    caller's own: holding a token already held changes nothing (a `hold` whose answer was
    lost can be sent again), and `release` takes the same field."""

    model_config = ConfigDict(extra="forbid", strict=True)

    token: str | None = Field(default=None, min_length=1, max_length=MAX_ID_LENGTH)


# The bound on `stop`'s final queries (docs/contract.md, `stop`): at most this many requests
# are asked, and the asking ends this long after it began.
MAX_STOP_QUERIES = 100
MAX_STOP_QUERY_DEADLINE_MS = 60_000


class StopInput(BaseModel):
    """`stop` payload: `{}`, or `{"query_limit"?, "query_deadline_ms"?}` to ask fewer
    requests, or for less long, than the bound (`0` asks none). An unknown field is
    refused, naming it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query_limit: int = Field(default=MAX_STOP_QUERIES, ge=0, le=MAX_STOP_QUERIES)
    query_deadline_ms: int = Field(
        default=MAX_STOP_QUERY_DEADLINE_MS, ge=0, le=MAX_STOP_QUERY_DEADLINE_MS
    )


class RequestStatus(BaseModel):
    """What submit and query answer (unknown fields are kept)."""

    model_config = ConfigDict(extra="allow")

    outcome: Annotated[RequestOutcome, Lenient] = RequestOutcome.UNRESOLVED
    error: str | None = None
    retry_after_ms: int | None = None
    canonical: JsonValue = None
    blocked: bool | None = None


class OperationRecord(BaseModel):
    """An enqueued operation and where it is (L2-L6, L9)."""

    intent: OperationIntent
    sequence: int
    phase: Annotated[OperationPhase, Lenient] = OperationPhase.PENDING
    blockers: list[str] = Field(default_factory=list)
    request_id: str | None = None
    outcome: str | None = None
    error: str | None = None


class RequestRecord(BaseModel):
    """A frozen request: the exact body sent, plus its submit/query progress (L6-L10)."""

    id: str
    operation_ids: list[str]
    operation_type: str
    canvas_ids: list[str]
    body: dict[str, Any]
    phase: Annotated[RequestPhase, Lenient] = RequestPhase.FROZEN
    attempt: int = 0
    retry_at: int | None = None
    retry_action: Annotated[RequestAction, Lenient] = RequestAction.SUBMIT
    last_status: dict[str, Any] | None = None
    blocker: str | None = None
    # How many times its loop was started; reports from an earlier loop are ignored.
    launch: int = 1
    # Waiting for the ledger's grant to make its next attempt (its last report said so): not
    # in progress, so it holds no slot and no lane place (L4), only its claims (L5).
    waiting: bool = False


class LedgerCounters(BaseModel):
    """What happened since the ledger started counting (see `core.counters_of`); the
    snapshot's `counters`. Every dict is keyed by a small fixed vocabulary."""

    operations_enqueued: int = 0
    # By outcome: applied, rejected, skipped.
    operations_resolved: dict[str, int] = Field(default_factory=dict)
    # Submit and query calls reported by the ledger's requests, by answer: applied, rejected,
    # accepted, unresolved, blocked, transport (the call failed), unknown (unreadable).
    request_attempts: dict[str, int] = Field(default_factory=dict)
    # Requests that became blocked, by kind of reason: far_side (a `blocked` answer),
    # completion (its `complete_activity` refused or failed), or an interruption's kind.
    requests_blocked: dict[str, int] = Field(default_factory=dict)
    # `complete_activity` answers that blocked a resolution: refused, failed.
    completion_refusals: dict[str, int] = Field(default_factory=dict)


class LedgerState(BaseModel):
    """Everything the ledger knows; carried whole across continue-as-new, so bounded (see
    `core.compact` and `core.check_budget`)."""

    ledger_id: str
    operations: dict[str, OperationRecord] = Field(default_factory=dict)
    # Resolved operations that left `operations` (oldest first): id -> outcome. Duplicate
    # detection and dependencies honour them; the oldest are dropped past `remember_ids`.
    forgotten: dict[str, str] = Field(default_factory=dict)
    # Operations resolved since the ledger began (applied, rejected or skipped).
    resolved_total: int = 0
    requests: dict[str, RequestRecord] = Field(default_factory=dict)
    # op id -> request id reserved while its compile activity runs.
    compiling: dict[str, str] = Field(default_factory=dict)
    claims: dict[str, str] = Field(default_factory=dict)
    holds: list[str] = Field(default_factory=list)
    next_sequence: int = 1
    stopped: bool = False
    dropped_signals: int = 0
    # IDs that `enqueue` signals sent with another intent than the one recorded (not recorded).
    signal_conflicts: int = 0
    # What `stop`'s final query of each request asked gave (`core.record_stop_query`):
    # request id -> an outcome, `blocked` or `no_answer`. Only a stopping ledger has any (at
    # most MAX_STOP_QUERIES), and a stopped one is never carried on.
    stop_answers: dict[str, str] = Field(default_factory=dict)
    # Requests an earlier run started, cancelled by workflow ID (at `stop`, or blocked by the
    # core), whose last report (`request_ended`) has not arrived yet: `stop` waits for them.
    awaiting_final_reports: list[str] = Field(default_factory=list)
    # None only in a carried state without counters (see `core.counters_of`).
    counters: LedgerCounters | None = None


class LedgerInput(LedgerConfig):
    """Start input of `OperationLedger`: every field optional.

    `carried_state` is internal: the state handed over by continue-as-new.
    """

    carried_state: LedgerState | None = None


class FrozenRequestInput(BaseModel):
    """Start input of a `FrozenRequest` child: the frozen body and where its loop resumes."""

    ledger_id: BoundedId
    request: dict[str, Any]
    next_action: Annotated[RequestAction, Lenient] = RequestAction.SUBMIT
    attempt: int = 0
    launch: int = 1
    not_before: int | None = None
    submit_activity: ActivityName = "submit"
    query_activity: ActivityName = "query"
    complete_activity: ActivityName | None = None
    activity_task_queue: TaskQueueName | None = None
    retry: RetryConfig = Field(default_factory=RetryConfig)
    activity_timeout_ms: int = Field(default=30_000, ge=1, le=MAX_INT32)
    # `stop`'s final query: one query with the frozen body, no retry, then report and end
    # (behind the `stop-final-query` patch in the child).
    final_query: bool = False
    # After a non-final attempt, report it and wait for the ledger's `grant` (the ledger owns
    # the retry clock and the slot, L4) instead of sleeping its own timer. False: it sleeps its
    # own timers (launched by a ledger that keeps own timers, or recorded before grants).
    wait_for_grants: bool = False

    @model_validator(mode="after")
    def _request_has_an_id(self) -> FrozenRequestInput:
        if not isinstance(self.request.get("id"), str):
            raise ValueError(f"request.id must be a string, got {self.request.get('id')!r:.80}")
        return self


class RequestReport(BaseModel):
    """What a `FrozenRequest` signals to its ledger (`request_progress`/`request_finished`)."""

    request_id: str
    phase: Annotated[RequestPhase, Lenient]
    status: dict[str, Any]
    attempt: int
    next_action: Annotated[RequestAction, Lenient]
    retry_at: int | None = None
    launch: int | None = None
    # The request now waits for the ledger's `grant` before its next attempt (L4).
    awaiting_grant: bool = False


class GrantInput(BaseModel):
    """The ledger's `grant` signal to a waiting `FrozenRequest`: make the next attempt of this
    launch, after this many attempts (an older grant is stale)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    launch: int
    attempt: int


SNAPSHOT_PAGE_DEFAULT = 200
SNAPSHOT_PAGE_MAX = 300


class SnapshotQuery(BaseModel):
    """Arguments of the `snapshot` query (all optional): operations in `phase`, with a
    sequence greater than `after` (the previous page's `next_after`), at most `limit`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    phase: Annotated[OperationPhase | None, Lenient] = None
    after: int | None = None
    limit: int = Field(default=SNAPSHOT_PAGE_DEFAULT, ge=1, le=SNAPSHOT_PAGE_MAX)
