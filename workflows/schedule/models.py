"""Wire models of the schedule (docs/contract.md section 2), shared by the core, the
workflows and the activities. Field names are the public JSON names."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from workflows.limits import (
    MAX_INT32,
    MAX_JSON_DEPTH,
    ActivityName,
    TaskQueueName,
    WorkflowId,
    json_depth,
)
from workflows.validation import carried

MAX_DELAY_MS = 2**31 - 1
MAX_SAFE_INTEGER = 2**53 - 1
# `remaining_runs` (a start field, and the count the schedule carries) at most.
MAX_REMAINING_RUNS = 10**9
DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS = 2000
# `start_at` / `end_at` at most 2100-01-01T00:00:00Z: a first tick further off would need a
# timer longer than Temporal's (292 years of nanoseconds) and a date Python cannot show.
MAX_LIFE_BOUND_MS = 4_102_444_800_000


class OutcomeRetries(BaseModel):
    """Retry policy of outcome delivery; `max_attempts` counts the first attempt."""

    max_attempts: int = Field(10, ge=1, le=MAX_INT32)
    initial_interval_ms: int = Field(1000, ge=1, le=MAX_DELAY_MS)
    backoff_coefficient: float = Field(2.0, ge=1.0, allow_inf_nan=False)
    maximum_interval_ms: int = Field(60_000, ge=1, le=MAX_DELAY_MS)

    @model_validator(mode="after")
    def _maximum_not_below_initial(self) -> OutcomeRetries:
        if self.maximum_interval_ms < self.initial_interval_ms:
            raise ValueError(
                "outcome_retries.maximum_interval_ms must be >= initial_interval_ms, got "
                f"{self.maximum_interval_ms} < {self.initial_interval_ms}"
            )
        return self


class OverlapPolicy(StrEnum):
    """What a tick does when every slot is busy (the `overlap` start field)."""

    # Wait in the durable queue, up to `max_queued_runs`.
    QUEUE = "queue"
    # Skipped at once (native Schedules' default).
    SKIP = "skip"
    # Wait only if no other run does (APScheduler-like coalescing).
    BUFFER_ONE = "buffer_one"


class SkipReason(StrEnum):
    """Why a due tick was skipped instead of recorded as a run (its `skipped` event)."""

    # The queue was at `max_queued_runs`.
    QUEUE_FULL = "queue_full"
    # The overlap policy (`skip`, `buffer_one`) left it no place.
    OVERLAP = "overlap"
    # Its run would take the carried state past the budget.
    STATE_BUDGET = "state_budget"
    # It fired more than `catchup_window_ms` after it was due (`next_at + jitter_ms`).
    CATCHUP_WINDOW = "catchup_window"


class RunHost(StrEnum):
    """Who hosts a schedule's run activity (the `run_host` start field)."""

    # A worker with `DurabilityPlugin`: the plugin heartbeats for the run and enforces
    # `run_timeout_ms` in the worker, so the run's child sets no timer of its own.
    PLUGIN = "plugin"
    # Anything else (another SDK, a worker without the plugin): the child's own timer
    # bounds the run; cancellation reaches it only through its heartbeats.
    EXTERNAL = "external"


# Heartbeat timeout of a plugin-hosted run when `run_heartbeat_timeout_ms` is not set: a run
# whose worker died is reported interrupted (S10) this long after its last heartbeat.
PLUGIN_RUN_HEARTBEAT_TIMEOUT_MS = 30_000
# How long past `run_timeout_ms` the server lets a plugin-hosted run activity go on (its
# start-to-close timeout is `run_timeout_ms` plus this): the worker cancels the handler at
# the deadline and keeps heartbeating until it really stops, so only a handler still going a
# day after its deadline is abandoned by the server (reported ScheduledRunTimeoutError).
PLUGIN_RUN_STOP_ALLOWANCE_MS = 24 * 3600 * 1000
# The activity ID a plugin-hosted run activity is scheduled with: it tells the plugin's
# worker that the activity is a schedule's run and what its deadline is (the run activity's
# argument is wire contract, so the timeout cannot travel there).
PLUGIN_RUN_ACTIVITY_ID_PREFIX = "run:timeout_ms="


def plugin_run_activity_id(run_timeout_ms: int) -> str:
    """The activity ID of a plugin-hosted run activity with this timeout."""
    return f"{PLUGIN_RUN_ACTIVITY_ID_PREFIX}{run_timeout_ms}"


def plugin_run_timeout_ms(activity_id: str) -> int | None:
    """The run timeout a plugin-hosted run activity's ID carries; None for any other ID."""
    digits = activity_id.removeprefix(PLUGIN_RUN_ACTIVITY_ID_PREFIX)
    if digits == activity_id or not digits.isdigit() or not digits.isascii():
        return None
    timeout = int(digits)
    return timeout if 1 <= timeout <= MAX_DELAY_MS else None


class DstPolicy(BaseModel):
    """What a schedule does with a local time that daylight saving skips or repeats (the
    `dst_policy` start field). It applies to the times an expression names by hour: an
    hours field beginning with `*` (or naming every hour) goes on hourly through a change."""

    model_config = ConfigDict(extra="forbid")

    # A local time that does not exist (spring forward): `shift` fires at the end of the
    # gap (crontab's behaviour), `skip` does not fire that day.
    nonexistent: Literal["shift", "skip"] = "shift"
    # A local time that occurs twice (fall back): fire in the `first` copy (crontab's
    # behaviour), the `last`, or `both`.
    ambiguous: Literal["first", "last", "both"] = "first"


class ScheduleInput(BaseModel):
    """Start input of `DurabilitySchedule`; every field is optional."""

    object_id: str | None = None
    max_concurrent_runs: int = Field(10, ge=1, le=1000)
    # Runs waiting for a slot; a tick that finds the queue full is skipped (never run), with
    # a `skipped` lifecycle event. 0: a tick that finds every slot busy is skipped.
    max_queued_runs: int = Field(100, ge=0, le=1000)
    # Dead-lettered outcomes kept for the `dead_letters` query and `redeliver` (oldest
    # dropped first); each carries its run's params, so the bound keeps the state small.
    max_dead_letters: int = Field(10, ge=0, le=20)
    # What a tick does when every slot is busy; see OVERLAP_QUEUE_LIMIT.
    overlap: OverlapPolicy = OverlapPolicy.QUEUE
    run_timeout_ms: int = Field(900_000, ge=1, le=MAX_DELAY_MS)
    run_heartbeat_timeout_ms: int | None = Field(None, ge=1, le=MAX_DELAY_MS)
    outcome_timeout_ms: int = Field(60_000, ge=1, le=MAX_DELAY_MS)
    outcome_retries: OutcomeRetries = Field(default_factory=OutcomeRetries)
    # Names Temporal accepts in a command (workflows.limits); object_id is checked by the
    # workflow, which may take it from the workflow ID.
    run_activity: ActivityName = "run"
    outcome_activity: ActivityName = "on_outcome"
    lifecycle_activity: ActivityName | None = None
    activity_task_queue: TaskQueueName | None = None
    # Who hosts the run activity; None: `plugin` when `activity_task_queue` is null (the
    # run runs on durability's own task queue), else `external` (see `hosted_by`).
    run_host: RunHost | None = None
    # Bounds on the schedule's life (null/false: unbounded). A tick
    # that fires more than this after it was due is skipped (`catchup_window`), not run.
    catchup_window_ms: int | None = Field(None, ge=1, le=MAX_DELAY_MS)
    # No tick is scheduled before `start_at` nor at or after `end_at` (epoch ms).
    # At most MAX_LIFE_BOUND_MS for a new start and `configure`; a carried value is only held
    # to MAX_SAFE_INTEGER: a running schedule must not fail on continuing as new.
    start_at: int | None = Field(None, ge=0)
    end_at: int | None = Field(None, ge=0)
    # How many ticks may still record a run: read at the first start only, then counted
    # down in the carried state (`ScheduleState.remaining_runs`). Null: no limit.
    remaining_runs: int | None = Field(None, ge=0, le=MAX_REMAINING_RUNS)
    # A run that finishes `errored` pauses the schedule, with a note naming it.
    pause_on_failure: bool = False
    # Local times daylight saving skips or repeats, for cron with CRON_TZ (docs/cron.md).
    dst_policy: DstPolicy = Field(default_factory=DstPolicy)
    # Not part of the wire contract: continue-as-new once history has this many events
    # (None: when Temporal suggests it, or at DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS).
    continue_as_new_after_events: int | None = Field(None, ge=10)

    @field_validator("start_at", "end_at")
    @classmethod
    def _within_life_bound(cls, value: int | None, info: ValidationInfo) -> int | None:
        bound = MAX_SAFE_INTEGER if carried(info) else MAX_LIFE_BOUND_MS
        if value is not None and value > bound:
            raise PydanticCustomError(
                "less_than_equal", "Input should be less than or equal to {le}", {"le": bound}
            )
        return value

    @model_validator(mode="after")
    def _end_after_start(self) -> ScheduleInput:
        if self.start_at is not None and self.end_at is not None and self.end_at <= self.start_at:
            raise ValueError(
                f"end_at must be after start_at, got end_at={self.end_at} <= "
                f"start_at={self.start_at}"
            )
        return self

    def bounded(self) -> bool:
        """Whether any bound on the schedule's life is set (`catchup_window_ms` ...
        `pause_on_failure`)."""
        return self.pause_on_failure or any(getattr(self, f) is not None for f in BOUND_FIELDS)

    def without_bounds(self) -> ScheduleInput:
        """These settings with every bound at its default (unbounded)."""
        unbounded: dict[str, Any] = dict.fromkeys(BOUND_FIELDS)
        return self.model_copy(update={**unbounded, "pause_on_failure": False})

    def hosted_by(self) -> RunHost:
        """`run_host`, or what its absence means."""
        if self.run_host is not None:
            return self.run_host
        return RunHost.PLUGIN if self.activity_task_queue is None else RunHost.EXTERNAL


# The start fields that bound a schedule's life (all unbounded by default).
BOUND_FIELDS = ("catchup_window_ms", "start_at", "end_at", "remaining_runs")


# --- message payloads, read strictly (JSON mode) by the catalog (`workflows.schedule.messages`)

# `set.expression` at most, in characters; `set.params` as JSON at most, in bytes (every run
# carries the params of the version it ran under).
MAX_EXPRESSION_LENGTH = 500
MAX_PARAMS_BYTES = 8 * 1024
# How many runs one `backfill` may record.
MAX_BACKFILL_RUNS = 100
# A pause note at most (`pause {"note"}`, or written by `pause_on_failure`), in characters;
# a failure's note shows at most FAILURE_NOTE_ERROR_LENGTH characters of its error.
MAX_PAUSE_NOTE_LENGTH = 1200
FAILURE_NOTE_ERROR_LENGTH = 250
# How many ended runs `describe` shows (the ring `ScheduleState.recent_runs`), and how many
# fire times it may compute (`{"next": n}`).
RECENT_RUNS_KEPT = 10
MAX_NEXT_FIRE_TIMES = 50

SafeInteger = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)]
DelayMs = Annotated[int, Field(ge=0, le=MAX_DELAY_MS)]

# The parse context a shell passes (`Message.parse`): the workflow's time, and the
# schedule's `next_occurrence` a `set` expression must parse with.
NOW_MS = "now_ms"
NEXT_OCCURRENCE = "next_occurrence"


def _context(info: ValidationInfo, key: str) -> Any:
    return info.context.get(key) if isinstance(info.context, dict) else None


def _refused(reason: str) -> PydanticCustomError:
    # The reason as context, not as the template: an expression's braces are not fields.
    return PydanticCustomError("value_error", "{reason}", {"reason": reason})


class JitterRange(BaseModel):
    """`{"max_ms": n}`: a jitter picked uniformly in [0, n] when the version is stored."""

    model_config = ConfigDict(extra="forbid")

    max_ms: DelayMs


# `set.jitter_ms`: an integer, or an object (`JitterRange`); an error names the one it reads.
Jitter = Annotated[
    Annotated[DelayMs, Tag("integer")] | Annotated[JitterRange, Tag("range")],
    Discriminator(lambda value: "range" if isinstance(value, dict | JitterRange) else "integer"),
]


class SetRequest(BaseModel):
    """Payload of `set` (signal and update, S2). With the parse context (`NOW_MS`,
    `NEXT_OCCURRENCE`) the expression must parse: `next_occurrence` raises no ValueError."""

    model_config = ConfigDict(extra="forbid")

    expression: Annotated[str, Field(max_length=MAX_EXPRESSION_LENGTH)]
    version: SafeInteger
    jitter_ms: Jitter = 0
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("expression", mode="after")
    @classmethod
    def _parses(cls, expression: str, info: ValidationInfo) -> str:
        if not expression.strip():
            raise _refused("must not be blank")
        next_occurrence = _context(info, NEXT_OCCURRENCE)
        if next_occurrence is not None:
            try:
                next_occurrence(expression, _context(info, NOW_MS))
            except ValueError as error:
                raise _refused(f"does not parse: {error}") from None
        return expression

    @field_validator("params", mode="after")
    @classmethod
    def _bounded(cls, params: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(params, separators=(",", ":"), default=str))
        if size > MAX_PARAMS_BYTES:
            raise _refused(f"is {size} bytes as JSON, more than the limit of {MAX_PARAMS_BYTES}")
        depth = json_depth(params)
        if depth > MAX_JSON_DEPTH:
            raise _refused(f"nests {depth} levels deep, more than {MAX_JSON_DEPTH}")
        return params


class CancelRequest(BaseModel):
    """Payload of `cancel`: `{}` or `{"version": n}` (`null`: none)."""

    model_config = ConfigDict(extra="forbid")

    version: SafeInteger | None = None


class PauseRequest(BaseModel):
    """Payload of `pause`: an optional `note` saying why. Anything else in it is ignored (a
    payload that is not an object too): a `pause` without a note is any payload."""

    note: Annotated[str, Field(max_length=MAX_PAUSE_NOTE_LENGTH)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _object_or_nothing(cls, payload: Any) -> Any:
        return payload if isinstance(payload, dict) else {}


class BackfillRequest(BaseModel):
    """Payload of `backfill`: a past range [start_at, end_at) of epoch ms (with the parse
    context `NOW_MS`, `end_at` must not be in the future)."""

    model_config = ConfigDict(extra="forbid")

    start_at: SafeInteger
    end_at: SafeInteger

    @field_validator("end_at", mode="after")
    @classmethod
    def _past_range(cls, end_at: int, info: ValidationInfo) -> int:
        start_at = info.data.get("start_at")
        if start_at is not None and end_at <= start_at:
            raise _refused(f"must be after start_at, got {end_at} <= {start_at}")
        now = _context(info, NOW_MS)
        if now is not None and end_at > now:
            raise _refused(f"must not be in the future, got {end_at} > {now}")
        return end_at


class RedeliverRequest(BaseModel):
    """Payload of `redeliver`: the dead letter's key."""

    model_config = ConfigDict(extra="forbid")

    idempotency_key: Annotated[str, Field(min_length=1)]


class DescribeQuery(BaseModel):
    """The `describe` query's argument: how many recent runs and next fire times to show."""

    model_config = ConfigDict(extra="forbid")

    runs: Annotated[int, Field(ge=0, le=RECENT_RUNS_KEPT)] = RECENT_RUNS_KEPT
    next: Annotated[int, Field(ge=0, le=MAX_NEXT_FIRE_TIMES)] = 10


class RunStatus(StrEnum):
    """Where a run is: waiting for a slot, running, or finished with its outcome."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETE = "complete"
    ERRORED = "errored"


# A run's error as the schedule keeps it (in its runs, dead letters and outcome calls): a run
# handler raising a megabyte-long message must not grow the carried state, the `runs` query
# or the outcome call past Temporal's payload limit.
MAX_RUN_ERROR_NAME = 200
MAX_RUN_ERROR_MESSAGE = 1024


class RunError(BaseModel):
    """A serialized error: the error type's name and its message, each cut to its bound
    (MAX_RUN_ERROR_NAME, MAX_RUN_ERROR_MESSAGE characters) wherever one is made or read."""

    name: str
    message: str

    @field_validator("name", mode="after")
    @classmethod
    def _cut_name(cls, name: str) -> str:
        return name[:MAX_RUN_ERROR_NAME]

    @field_validator("message", mode="after")
    @classmethod
    def _cut_message(cls, message: str) -> str:
        return message[:MAX_RUN_ERROR_MESSAGE]


class Outcome(BaseModel):
    """What a run ended with, as the outcome activity receives it."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["complete", "errored"]
    error: RunError | None = None

    def wire(self) -> dict[str, Any]:
        """`{"status": "complete"}` or `{"status": "errored", "error": {...}}`."""
        return self.model_dump(mode="json", exclude_none=True)


class ScheduledRunObject(BaseModel):
    """The one argument of the run activity (and the first of the outcome activity)."""

    object_id: str
    scheduled_time: int
    due_at: int
    idempotency_key: str
    params: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of(
        cls, object_id: str, scheduled_time: int, due_at: int, params: dict[str, Any]
    ) -> ScheduledRunObject:
        """The run of `object_id` scheduled at `scheduled_time`, keyed by its idempotency key."""
        return cls(
            object_id=object_id,
            scheduled_time=scheduled_time,
            due_at=due_at,
            idempotency_key=idempotency_key(object_id, scheduled_time),
            params=params,
        )


class ScheduledRunInput(BaseModel):
    """Input of the `ScheduledRun` child workflow: its run and the schedule's settings."""

    run: ScheduledRunObject
    schedule_workflow_id: WorkflowId
    settings: ScheduleInput
    # The run took its schedule's last free slot: signal `run_settled` as soon as it finishes
    # (a run that delivers its own outcome: see `deliver_by_schedule`).
    settle_by_signal: bool = False
    # The schedule delivers the outcome: the run ends as soon as it finishes, its result
    # carrying the outcome (`ScheduledRunResult.outcome_pending`). Without it (or behind
    # no `RUN_PATHS_PATCH` marker) the run delivers its own outcome.
    deliver_by_schedule: bool = False
    # Set by a schedule behind `RUN_PATHS_FROM_INPUT_PATCH`: the run takes the current paths
    # without asking `RUN_PATHS_PATCH` (whose marker and change-version upsert cost each run
    # two events), and an external run's timeout is kept by the server, not a run timer
    # (`workflows.schedule.run.run_paths`). A run whose input lacks it asks the patch as before.
    run_paths: bool = False


# Internal signals from a run to its schedule (not part of the wire contract).
RUN_SETTLED_SIGNAL = "durability.run_settled"
RUN_ACKNOWLEDGED_SIGNAL = "durability.run_acknowledged"


class RunSettled(BaseModel):
    """Internal signal from a run to its schedule: the run stopped (its slot is free)."""

    scheduled_time: int
    outcome: Outcome


class RunAcknowledged(BaseModel):
    """Internal signal from a run to its schedule: its outcome was delivered or dead-lettered."""

    scheduled_time: int
    dead_lettered: bool = False
    # The run's outcome and why its delivery failed, when dead-lettered.
    outcome: Outcome | None = None
    dead_letter_error: RunError | None = None


class ScheduledRunResult(BaseModel):
    """What a `ScheduledRun` child returns. With `outcome_pending` the run stopped and its
    outcome is still to be delivered, by the schedule; without, the run delivered it itself
    and the schedule reads the completion as the acknowledgement (after continue-as-new, the
    run signals `run_acknowledged`)."""

    outcome: Outcome
    # Whether the run delivered its outcome itself; None when the schedule delivers it
    # (`outcome_pending`): the run cannot know how that delivery ends.
    delivered: bool | None
    dead_letter_error: RunError | None = None
    outcome_pending: bool = False


# The contract's error names, carried in `Outcome.error.name`.
RUN_TIMEOUT_ERROR = "ScheduledRunTimeoutError"
RUN_INTERRUPTED_ERROR = "ScheduledRunInterruptedError"
OUTCOME_TIMEOUT_ERROR = "ScheduledOutcomeTimeoutError"


def idempotency_key(object_id: str, scheduled_time: int) -> str:
    """`<object_id>:<scheduled_time>`: unique per run because a tick fires at most once."""
    return f"{object_id}:{scheduled_time}"


def run_workflow_id(object_id: str, scheduled_time: int) -> str:
    """Workflow ID of a run's child workflow."""
    return f"schedule-run:{object_id}:{scheduled_time}"


def schedule_workflow_id(object_id: str) -> str:
    """Workflow ID of an object's schedule."""
    return f"schedule:{object_id}"


def lifecycle_event(
    event_type: str, key: str, scheduled_time: int, timestamp: int, **fields: Any
) -> dict[str, Any]:
    """A lifecycle event (S12) as JSON: common fields plus the type's own."""
    return {
        "entity_kind": "scheduled_run",
        "id": key,
        "scheduled_time": scheduled_time,
        "timestamp": timestamp,
        "type": event_type,
        **fields,
    }


# Left out of span attributes: an error's message can carry user data (a webhook's URL, the
# far side's answer), and spans leave the workers' trust boundary for a collector, unencrypted.
# The error's type name stays; the message is read in the UI, through the codec.
SPAN_OMITTED_FIELDS = frozenset({"message"})


def lifecycle_span_attributes(event: dict[str, Any]) -> dict[str, str | int | bool]:
    """A lifecycle event flattened into OpenTelemetry attributes (`durability.<field>`),
    without the fields a span must not carry (`SPAN_OMITTED_FIELDS`)."""
    attributes: dict[str, str | int | bool] = {}
    for key, value in event.items():
        if isinstance(value, dict):
            for inner_key, inner in value.items():
                if inner_key not in SPAN_OMITTED_FIELDS:
                    attributes[f"durability.{key}.{inner_key}"] = str(inner)
        elif isinstance(value, str | int | bool):
            attributes[f"durability.{key}"] = value
    return attributes


# --- the schedule's state, carried across continue-as-new (decided on by `core.ScheduleCore`)


class StoredSchedule(BaseModel):
    """The stored schedule; `expression is None` is a cancel tombstone of `version`."""

    version: int
    expression: str | None
    next_at: int | None
    jitter_ms: int
    params: dict[str, Any] = Field(default_factory=dict)


class Run(BaseModel):
    """One tick's run, kept until its outcome is acknowledged or dead-lettered."""

    scheduled_time: int
    due_at: int
    state: RunStatus = RunStatus.QUEUED
    # Run starts: 0 while queued, 1 once started (S10: a run is never re-run).
    attempt: int = 0
    error: RunError | None = None
    # The params stored with the version that fired this tick (not in the `runs` query).
    params: dict[str, Any] = Field(default_factory=dict)
    # The run stopped and its child ended; the schedule delivers its outcome (S11). Until
    # delivered or dead-lettered it shows `complete`/`errored` and holds no slot.
    outcome_pending: bool = False
    # The delivery's attempts left once a continue-as-new interrupted it (None: all of
    # `outcome_retries.max_attempts`); see `attempts_begun`.
    delivery_attempts_left: int | None = None
    # When its child was started (None: queued, or carried in state that did not keep it);
    # shown by `describe`, not by the `runs` query.
    started_at: int | None = None

    def outcome(self) -> Outcome:
        """The outcome a finished run finished with."""
        status = "complete" if self.state == RunStatus.COMPLETE else "errored"
        return Outcome(status=status, error=self.error)

    def wire(self) -> dict[str, Any]:
        """The run as the `runs` query returns it."""
        return self.model_dump(
            mode="json", include={"scheduled_time", "due_at", "state", "attempt", "error"}
        )


class DeadLetter(BaseModel):
    """A run's outcome whose delivery was given up, kept so a user can see and re-drive it."""

    scheduled_time: int
    due_at: int
    idempotency_key: str
    params: dict[str, Any] = Field(default_factory=dict)
    outcome: Outcome
    error: RunError
    redelivering: bool = False

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"params"})


class Delivery(StrEnum):
    """What became of an ended run's outcome (a `describe` recent run's `delivery`)."""

    # Still to be delivered (the schedule's delivery, or the run's own, is going on).
    PENDING = "pending"
    DELIVERED = "delivered"
    # Its delivery gave up: it is (or was) in `dead_letters`.
    DEAD_LETTERED = "dead_lettered"
    # Dead-lettered, then delivered by `redeliver`.
    REDELIVERED = "redelivered"
    # Its run's workflow ended without delivering it (terminated or failed from outside).
    UNDELIVERED = "undelivered"


# How much of an error each ended run `describe` shows keeps: docs/limits.md counts the ring
# of ended runs in the state budget.
MAX_RECENT_ERROR_NAME = 100
MAX_RECENT_ERROR_MESSAGE = 200


class RecentRun(BaseModel):
    """A run that ended, as `describe` shows it; small and bounded (errors cut)."""

    scheduled_time: int
    due_at: int
    started_at: int | None = None
    ended_at: int | None = None
    # None: the run's end was reported without its outcome (a run handed over across
    # continue-as-new that had delivered before it was told to report by signal).
    outcome: Outcome | None = None
    delivery: Delivery = Delivery.PENDING


class ScheduleCounters(BaseModel):
    """What happened to the schedule's runs and ticks, counted as they happen (state carried
    without counters starts them with `carried_from`)."""

    runs_started: int = 0
    runs_completed: int = 0
    runs_errored: int = 0
    # Ticks skipped, by `SkipReason` value (the total is `ScheduleState.skipped_ticks`).
    ticks_skipped: dict[str, int] = Field(default_factory=dict)
    outcomes_delivered: int = 0
    outcomes_dead_lettered: int = 0
    outcomes_redelivered: int = 0

    @classmethod
    def carried_from(cls, state: ScheduleState) -> ScheduleCounters:
        """Counters for carried state that has none: what that state knows (its dead letters,
        kept and dropped); the rest counts from now."""
        return cls(outcomes_dead_lettered=len(state.dead_letters) + state.dead_letters_dropped)


class ScheduleState(BaseModel):
    """Everything the schedule carries across continue-as-new."""

    schedule: StoredSchedule | None = None
    runs: dict[int, Run] = Field(default_factory=dict)
    dropped_signals: int = 0
    # `pause`/`unpause` (beyond S1-S14): while paused no tick fires; versions are untouched.
    paused: bool = False
    # Ticks not run because the queue was full or the state at its budget.
    skipped_ticks: int = 0
    # Outcomes whose delivery gave up (S11), newest last, for `dead_letters` / `redeliver`.
    dead_letters: list[DeadLetter] = Field(default_factory=list)
    dead_letters_dropped: int = 0
    # How many more ticks may record a run (None: no limit). Set from the start field
    # `remaining_runs` when the schedule is created (`initial_state`), then carried: the
    # start field is passed again at every continue-as-new and read no more.
    remaining_runs: int | None = None
    # Why the schedule is paused (`pause {"note"}`, or the run that paused it under
    # `pause_on_failure`); None when not paused or paused without a note.
    pause_note: str | None = None
    # The last RECENT_RUNS_KEPT runs that ended, oldest first (`describe`).
    recent_runs: list[RecentRun] = Field(default_factory=list)
    # None only in carried state without counters (`ScheduleCore` starts them).
    counters: ScheduleCounters | None = None
    # The scheduled_time of the last run `trigger` recorded: the next takes a later one, so a
    # trigger never falls on a time whose run already ran (and so could not run again).
    last_triggered_at: int | None = None


class ScheduleWorkflowInput(ScheduleInput):
    """The schedule's start input plus, after continue-as-new, the carried state."""

    carried: ScheduleState | None = None
