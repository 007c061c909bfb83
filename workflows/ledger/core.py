"""Pure, deterministic core of the operation ledger (rules L1-L14). No Temporal import.

Every transition is a function of a `LedgerState` plus explicit inputs (config, request IDs,
the time in epoch ms), so the workflow shell replays it exactly and tests drive it directly.

Life of an operation:
  pending -> (ready: L3, capacity: L4, free canvases: L5) -> dispatched
    `begin_dispatch` reserves a request ID, one concurrency slot and the canvases while the
    compile activity runs; `freeze` records the exact request (L6) before anything is sent.
  dispatched -> resolved   when its request's submit/query loop ends `applied`/`rejected` (L9)
                           and its `complete_activity`, if set, accepts that
  dispatched -> blocked    compile error, participant mismatch, unsupported protocol version
                           (L6, L11), a `blocked` status (L10), or a completion that refused
                           or failed; request claims are kept.
  pending -> blocked       no participants and not participant-free (L5).

Slots (L4): only attempts in progress count toward `concurrency` and the lanes: a compile,
and a request's submit or query. A request waiting for its retry (backoff, `retry_after_ms`,
after `accepted`) reports so (`awaiting_grant`), frees its slot and lane place, keeps its claims
(L5), and waits for the ledger's grant: `plan_grants` hands slots to due retries first, by
(retry time, sequence), then `plan_launches` and `plan_dispatches` (the seed's `pump()`). A
request started before 0.1.1 (or with `own_retry_timers`) sleeps its own timer and counts for
its whole loop.

Choices the rules leave open:
- After a `blocked` status the next action is `query` (L13): a blocked submit was dispatched,
  so whether it took effect is unknown until asked, and a blocked query is asked again.
  Transport errors and unknown answers are `unresolved` (L7).
- `resume` (L13) restarts blocked requests whose protocol is supported (same body, same key,
  recorded next action and attempt) and returns operations blocked at compile time
  (compile error, participant mismatch, invalid compile result) to pending so they are
  compiled again under a new request ID (nothing was ever sent for them).
  `missing_participants` and `request_interpreter_unavailable` stay blocked: only `skip` ends them.
- `hold` (L12) stops every launch: new compiles, resume restarts and grants of due retries;
  attempts already in progress finish with their original identity.
- `skip` (ours): a pending or blocked operation (not one in flight) is resolved with outcome
  `skipped`; its request, if any, is resolved too and its canvases released. Dependents treat
  a skipped dependency as resolved and proceed: skipping is the user's explicit decision that
  the work is done or not needed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from workflows.budget import STATE_BUDGET_BYTES
from workflows.ledger import LEDGER_ID_PREFIX
from workflows.ledger.models import (
    MAX_BATCH_BYTES,
    MAX_PAYLOAD_BYTES,
    EmptyInput,
    EnqueueInput,
    EnqueueResult,
    FrozenRequestInput,
    HoldInput,
    LedgerConfig,
    LedgerCounters,
    LedgerInput,
    LedgerState,
    OperationIntent,
    OperationPhase,
    OperationRecord,
    ReleaseInput,
    RequestAction,
    RequestPhase,
    RequestRecord,
    RequestReport,
    RequestStatus,
    RetryConfig,
    SkipInput,
    SnapshotQuery,
    StopInput,
)
from workflows.limits import MAX_JSON_DEPTH, id_form_problem, id_problem, json_depth
from workflows.validation import (
    CARRIED_CONTEXT,
    configured,
    format_validation_error,
    read_start_input,
    settings_view,
)
from workflows.validation import InvalidRequest as InvalidRequest

MISSING_PARTICIPANTS = "missing_participants"
PARTICIPANT_MISMATCH = "participant_mismatch"
INVALID_COMPILE_RESULT = "invalid_compile_result"
# A frozen body may be at most this much larger than twice its intent (see freeze).
BODY_SLACK_BYTES = 4096
# Errors recorded on an operation are cut to this many characters.
MAX_ERROR_LENGTH = 500
# A request's last submit/query status is kept whole up to this size (see bounded_status).
MAX_STATUS_BYTES = 1024
# A compile result whose `operation_id` / `request_id` names another operation or request.
COMPILE_RESULT_MISMATCH = "compile_result_mismatch"
# Keys a compile activity may return to name what it compiled; checked, not frozen.
COMPILE_ECHO_KEYS = frozenset({"operation_id", "request_id"})
INTERPRETER_UNAVAILABLE = "request_interpreter_unavailable"
SKIPPED = "skipped"
# Blockers `resume` leaves alone: the intent itself would have to change.
PERMANENT_BLOCKERS = frozenset({MISSING_PARTICIPANTS, INTERPRETER_UNAVAILABLE})
MAX_BACKOFF_EXPONENT = 6


# The ledger's refusals are `InvalidRequest`s, as the schedule's are; `LedgerInputError` is
# the name they had in 0.1.0 (on the wire too, see `FORMER_REFUSAL_TYPES`), kept for one
# release.
LedgerInputError = InvalidRequest
# What the ledger's refusal types were called in 0.1.0 (sent in each refusal's details).
FORMER_REFUSAL_TYPES = {"InvalidRequest": "LedgerInputError"}


class LedgerStopped(InvalidRequest):
    """A message a stopped ledger no longer takes (`hold`, `resume`, `stop`); the class name is
    the rejection type clients see."""


class RecoveryConflictError(RuntimeError):
    """Two unresolved requests claim one canvas (L14): sending anything could collide."""


def canvases_of(intent: OperationIntent) -> list[str]:
    """The operation's canvases: participants deduplicated and sorted (L5)."""
    return sorted(set(intent.participants))


# ---------------------------------------------------------------- enqueue (L2)


def parse_enqueue(raw: Any) -> EnqueueInput:
    """Parse an `enqueue` payload; an `InvalidRequest` names the bad field and value."""
    if not isinstance(raw, dict):
        raise InvalidRequest(
            f'invalid enqueue input: expected {{"operations": [...]}}, got {raw!r:.80}'
        )
    try:
        batch = EnqueueInput.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("enqueue input", error)) from None
    total = 0
    for index, intent in enumerate(batch.operations):
        size = len(json.dumps(intent.payload, separators=(",", ":")))
        if size > MAX_PAYLOAD_BYTES:
            raise InvalidRequest(
                f"invalid enqueue input: operations.{index}.payload is {size} bytes as JSON, "
                f"more than the limit of {MAX_PAYLOAD_BYTES}"
            )
        depth = json_depth(intent.payload)
        if depth > MAX_JSON_DEPTH:
            raise InvalidRequest(
                f"invalid enqueue input: operations.{index}.payload nests {depth} levels deep, "
                f"more than {MAX_JSON_DEPTH}"
            )
        total += json_size(intent)
    if total > MAX_BATCH_BYTES:
        raise InvalidRequest(
            f"invalid enqueue input: the batch is {total} bytes as JSON, more than the limit "
            f"of {MAX_BATCH_BYTES}: split it"
        )
    return batch


def json_size(model: Any) -> int:
    """Bytes of a model (or the state) as JSON, as it is carried and sent."""
    return len(model.model_dump_json())


def check_budget(state: LedgerState, batch: EnqueueInput) -> None:
    """Refuse a batch that would take the carried state past STATE_BUDGET_BYTES. Each new
    intent is counted twice: its frozen body, later, is about its size (see `freeze`)."""
    new = [i for i in batch.operations if not is_known(state, i.id)]
    if not new:
        return
    current = json_size(state)
    added = 2 * sum(json_size(intent) for intent in new)
    if current + added > STATE_BUDGET_BYTES:
        raise InvalidRequest(
            f"ledger is full: its state is {current} bytes and these {len(new)} operations "
            f"need about {added} more, over the budget of {STATE_BUDGET_BYTES}; enqueue again "
            "once operations resolve"
        )


def is_known(state: LedgerState, op_id: str) -> bool:
    """An operation in the state, or resolved and still remembered: sent again, a duplicate or
    a conflict (see `enqueue`)."""
    return op_id in state.operations or op_id in state.forgotten


def check_enqueue(state: LedgerState, batch: EnqueueInput) -> None:
    """Reject an ID repeated in the batch and a dependency cycle (batch plus known operations)."""
    first_index: dict[str, int] = {}
    for index, intent in enumerate(batch.operations):
        if intent.id in first_index:
            raise InvalidRequest(
                f"invalid enqueue input: operations.{index}.id {intent.id!r} repeats "
                f"operations.{first_index[intent.id]}.id in the same batch"
            )
        first_index[intent.id] = index
    new = {i.id: i for i in batch.operations if not is_known(state, i.id)}
    cycle = _find_cycle(state, new)
    if cycle:
        raise InvalidRequest(
            "invalid enqueue input: dependency cycle " + " -> ".join(repr(c) for c in cycle)
        )


def _find_cycle(state: LedgerState, new: dict[str, OperationIntent]) -> list[str] | None:
    def deps(op_id: str) -> list[str]:
        if op_id in new:
            return new[op_id].dependencies
        known = state.operations.get(op_id)
        return known.intent.dependencies if known else []

    done: set[str] = set()
    for root in new:
        if root in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, child = stack.pop()
            if child == 0:
                if node in on_path:
                    return [*path[path.index(node) :], node]
                if node in done:
                    continue
                path.append(node)
                on_path.add(node)
            children = deps(node)
            if child < len(children):
                stack.append((node, child + 1))
                nxt = children[child]
                if nxt in on_path:
                    return [*path[path.index(nxt) :], nxt]
                if nxt not in done:
                    stack.append((nxt, 0))
            else:
                path.pop()
                on_path.discard(node)
                done.add(node)
    return None


# Each message's payload is parsed by one function below (`validate_*` when the state can refuse
# it too), before anything is recorded: `InvalidRequest` (or `LedgerStopped`) names what is
# wrong. The shell turns it into the update's rejection, typed by the error's class name, or
# drops the signal of the same name.


def validate_enqueue(
    state: LedgerState,
    raw: Any,
    config: LedgerConfig | None = None,
    refuse: Callable[[], bool] = lambda: True,
) -> EnqueueInput:
    """Everything the `enqueue` update validator checks; raises `InvalidRequest`. With the
    ledger's `config`, an operation that could never dispatch (no participants, a type that
    is not participant-free, L5) is refused too, naming it: the validator and the signal
    pass it; the update's handler does not (it applies what its validator accepted).
    `refuse()` is asked only when such an operation is found (a signal handler's patch)."""
    if state.stopped:
        raise InvalidRequest("ledger is stopped: enqueue refused")
    batch = parse_enqueue(raw)
    if config is not None:
        check_participants(batch, config, refuse)
    check_enqueue(state, batch)
    check_budget(state, batch)
    return batch


def check_update(name: str, state: LedgerState, config: LedgerConfig, payload: Any) -> None:
    """What the validator of update `name` checks of its `payload` (JSON values) against the
    state and the settings; InvalidRequest (or LedgerStopped) naming the field and value."""
    checks: dict[str, Callable[[], object]] = {
        "enqueue": lambda: validate_enqueue(state, payload, config),
        "hold": lambda: validate_hold(state, payload),
        "release": lambda: validate_release(state, payload),
        "settle": lambda: validate_empty(state, "settle", payload),
        "resume": lambda: validate_empty(state, "resume", payload),
        "skip": lambda: validate_skip(state, payload),
        "configure": lambda: validate_configure(state, payload, config),
        "stop": lambda: validate_stop(state, payload),
    }
    checks[name]()


def check_participants(
    batch: EnqueueInput, config: LedgerConfig, refuse: Callable[[], bool] = lambda: True
) -> None:
    """Refuse an operation with no participants whose type is not participant-free (L5): it
    would only ever be blocked (`missing_participants`)."""
    for index, intent in enumerate(batch.operations):
        if (
            not canvases_of(intent)
            and intent.operation_type not in config.participant_free_types
            and refuse()
        ):
            raise InvalidRequest(
                f"invalid enqueue input: operations.{index}.participants is empty and "
                f"operation_type {intent.operation_type!r:.80} is not participant-free "
                f"(participant_free_types: {config.participant_free_types!r:.200})"
            )


def enqueue(
    state: LedgerState, batch: EnqueueInput, config: LedgerConfig | None = None
) -> EnqueueResult:
    """Record new intents in arrival order (their sequence); known IDs are duplicates (L2),
    or conflicts when sent with another intent (`intent_conflicts`): neither is recorded.
    An operation with no participants is blocked at once unless its type is participant-free
    (L5): in the handler, so no later step changes state without a command."""
    free_types = (config or LedgerConfig()).participant_free_types
    counters = counters_of(state)  # before the sequence moves (it seeds from it)
    accepted: list[str] = []
    duplicates: list[str] = []
    conflicts: list[str] = []
    for intent in batch.operations:
        if is_known(state, intent.id):
            (conflicts if intent_conflicts(state, intent) else duplicates).append(intent.id)
            continue
        record = OperationRecord(intent=intent, sequence=state.next_sequence)
        if not canvases_of(intent) and intent.operation_type not in free_types:
            _block_operation(record, [MISSING_PARTICIPANTS], "operation has no participants")
        state.operations[intent.id] = record
        state.next_sequence += 1
        accepted.append(intent.id)
    counters.operations_enqueued += len(accepted)
    return EnqueueResult(accepted=accepted, duplicates=duplicates, conflicts=conflicts)


def canonical_intent(intent: OperationIntent) -> str:
    """An intent as canonical JSON: every field, object keys sorted (their order does not
    count; the order of lists, participants and dependencies included, does)."""
    return json.dumps(intent.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def intent_conflicts(state: LedgerState, intent: OperationIntent) -> bool:
    """A known ID sent with an intent other than the one recorded for it, compared as
    `canonical_intent`. A resolved operation keeps only its ID and type for sure (`compact`
    drops the rest, now or later), so only another `operation_type` is a conflict. An ID
    remembered only (`forgotten`) keeps no intent: never a conflict."""
    record = state.operations.get(intent.id)
    if record is None:
        return False
    if record.phase == "resolved":
        return intent.operation_type != record.intent.operation_type
    return canonical_intent(intent) != canonical_intent(record.intent)


def count_signal_conflicts(state: LedgerState, conflicts: list[str]) -> str:
    """An `enqueue` signal named known IDs with other intents: counted; returns what to log."""
    state.signal_conflicts += len(conflicts)
    shown = ", ".join(repr(c) for c in conflicts[:10]) + (" ..." if len(conflicts) > 10 else "")
    return (
        f"enqueue signal: {len(conflicts)} known IDs sent with another intent, not recorded "
        f"({state.signal_conflicts} so far): {shown}"
    )


# ---------------------------------------------------------------- dispatch (L3-L5)


def in_flight(state: LedgerState) -> tuple[int, Counter[str]]:
    """Attempts in progress (L4), in total and per operation type: compiles, and requests in
    flight that are not waiting for a grant (see `plan_grants`)."""
    by_type: Counter[str] = Counter()
    for op_id in state.compiling:
        by_type[state.operations[op_id].intent.operation_type] += 1
    for request in state.requests.values():
        if request.phase == "in_flight" and not request.waiting:
            by_type[request.operation_type] += 1
    return sum(by_type.values()), by_type


def _waiting(state: LedgerState) -> list[RequestRecord]:
    """Requests in flight that wait for a grant, in the seed's retry order: due time, then
    sequence."""
    waiting = [r for r in state.requests.values() if r.phase == "in_flight" and r.waiting]
    waiting.sort(key=lambda r: (r.retry_at or 0, _request_sequence(state, r)))
    return waiting


def plan_grants(state: LedgerState, config: LedgerConfig, now_ms: int) -> list[str]:
    """Waiting requests whose retry is due, to re-launch now (same body, key and recorded next
    action, L7), in (retry time, sequence) order, within concurrency and lanes counting only
    attempts in progress (L4). A due retry its lane refuses waits, and the next may go (the
    seed's `deferredRetries`). Nothing while held or stopped (L12)."""
    if state.stopped or state.holds:
        return []
    total, by_type = in_flight(state)
    chosen: list[str] = []
    for request in _waiting(state):
        if (request.retry_at or 0) > now_ms or total >= config.concurrency:
            break
        if not _fits(config, total, by_type, request.operation_type):
            continue
        chosen.append(request.id)
        by_type[request.operation_type] += 1
        total += 1
    return chosen


def mark_granted(state: LedgerState, request_id: str) -> RequestRecord:
    """A waiting request takes a slot for its next attempt: in progress again (L4)."""
    request = state.requests[request_id]
    request.waiting = False
    return request


def next_grant_due(state: LedgerState, config: LedgerConfig, now_ms: int) -> int | None:
    """When the ledger must wake to grant a retry (epoch ms): the earliest retry time still to
    come among waiting requests that a slot and their lane would take now. None when there is
    none (held, stopped, or no slot: an attempt that ends wakes the ledger anyway)."""
    if state.stopped or state.holds:
        return None
    total, by_type = in_flight(state)
    due = [
        r.retry_at
        for r in _waiting(state)
        if r.retry_at is not None
        and r.retry_at > now_ms
        and _fits(config, total, by_type, r.operation_type)
    ]
    return min(due, default=None)


def attempts_in_progress(state: LedgerState) -> int:
    """How many attempts are in progress (`settle` waits for none)."""
    return in_flight(state)[0]


def settle_result(state: LedgerState) -> dict[str, Any]:
    """What `settle` returns once no attempt is in progress: whether the ledger is held, how
    many requests wait for their retry, and the snapshot's counts."""
    return {
        "held": bool(state.holds),
        "waiting": sum(1 for r in state.requests.values() if r.phase == "in_flight" and r.waiting),
        "counts": counts(state),
    }


def _fits(config: LedgerConfig, total: int, by_type: Counter[str], operation_type: str) -> bool:
    if total >= config.concurrency:
        return False
    lane = config.lanes.get(operation_type)
    return lane is None or by_type[operation_type] < lane


def is_ready(state: LedgerState, record: OperationRecord) -> bool:
    """Pending, not blocked, not compiling, and every dependency resolved (L3)."""
    if record.phase != "pending" or record.blockers or record.intent.id in state.compiling:
        return False
    return all(is_resolved(state, dependency) for dependency in record.intent.dependencies)


def is_resolved(state: LedgerState, op_id: str) -> bool:
    """Resolved, in the state or remembered; an unknown ID is not (L3)."""
    known = state.operations.get(op_id)
    if known is None:
        return op_id in state.forgotten
    return known.phase == "resolved"


def waiting_for(state: LedgerState, record: OperationRecord) -> list[str]:
    """The dependencies keeping an operation that was not dispatched from being ready (L3):
    not resolved, unknown IDs included; sorted, each once (so at most 64, `MAX_REFERENCES`).
    Empty for a dispatched or resolved operation: it waits for none."""
    if record.phase not in ("pending", "blocked"):
        return []
    return sorted({d for d in record.intent.dependencies if not is_resolved(state, d)})


def plan_dispatches(state: LedgerState, config: LedgerConfig) -> list[str]:
    """Ready operations to compile now, in sequence order, within concurrency, lanes and free
    canvases. Blocks operations with no participants unless participant-free (L5)."""
    if state.stopped or state.holds:
        return []
    total, by_type = in_flight(state)
    taken = set(state.claims)
    chosen: list[str] = []
    for record in state.operations.values():
        if total >= config.concurrency:
            break
        if not is_ready(state, record):
            continue
        intent = record.intent
        canvases = canvases_of(intent)
        if not canvases and intent.operation_type not in config.participant_free_types:
            _block_operation(record, [MISSING_PARTICIPANTS], "operation has no participants")
            continue
        if not _fits(config, total, by_type, intent.operation_type):
            continue
        if any(canvas in taken for canvas in canvases):
            continue
        chosen.append(intent.id)
        taken.update(canvases)
        by_type[intent.operation_type] += 1
        total += 1
    return chosen


def begin_dispatch(state: LedgerState, op_id: str, request_id: str) -> None:
    """Reserve a slot and the operation's canvases for `request_id` while it compiles."""
    record = state.operations[op_id]
    for canvas in canvases_of(record.intent):
        holder = state.claims.get(canvas)
        if holder is not None and holder != request_id:
            raise RecoveryConflictError(f"canvas {canvas!r} is already claimed by {holder!r}")
    record.phase = OperationPhase.DISPATCHED
    record.request_id = request_id
    state.compiling[op_id] = request_id
    for canvas in canvases_of(record.intent):
        state.claims[canvas] = request_id


def abandon_dispatch(state: LedgerState, op_id: str) -> None:
    """Undo `begin_dispatch` when its compile was cancelled (stop): nothing was recorded."""
    request_id = state.compiling.pop(op_id, None)
    if request_id is None:
        return
    _release_claims(state, request_id)
    record = state.operations[op_id]
    record.phase = OperationPhase.PENDING
    record.request_id = None


def block_compile(state: LedgerState, op_id: str, message: str) -> None:
    """A compile error blocks the operation with the error's message (L6)."""
    request_id = state.compiling.pop(op_id, None)
    if request_id is None:
        return
    _release_claims(state, request_id)
    record = state.operations[op_id]
    record.request_id = None
    _block_operation(record, [message or "compile_failed"], message or "compile_failed")


FreezeResult = Literal["launch", "deferred", "blocked", "stale"]


def freeze(
    state: LedgerState,
    config: LedgerConfig,
    op_id: str,
    request_id: str,
    compiled: Any,
    may_defer: Callable[[], bool] = lambda: True,
) -> FreezeResult:
    """Record the frozen request from the compile result (L6, L11).

    `launch`: the request is recorded in flight and its loop must start now. `deferred`: it
    is recorded `frozen` and never sent yet, because no launch may happen now (held or
    stopped, L12; its slot or lane taken since, after a `configure`, L4): `plan_launches`
    starts it when one may. `blocked`: the operation (participant mismatch, invalid result)
    or the request (unsupported protocol, never sent) is blocked. `stale`: the reservation is
    gone (stop), nothing recorded. `may_defer()` is asked only when deferring would change
    what happens (a shell's patch: a history from before the gate launches as it did).
    """
    if state.compiling.get(op_id) != request_id:
        return "stale"
    record = state.operations[op_id]
    intent = record.intent
    participants = canvases_of(intent)
    problem = _compile_result_problem(compiled)
    if problem is not None:
        block_compile(state, op_id, f"{INVALID_COMPILE_RESULT}: {problem}")
        return "blocked"
    assert isinstance(compiled, dict)
    mismatch = _echo_mismatch(compiled, op_id, request_id)
    if mismatch is not None:
        block_compile(state, op_id, COMPILE_RESULT_MISMATCH)
        record.error = mismatch
        return "blocked"
    canvas_ids = sorted(set(compiled.get("canvas_ids", [])))
    if canvas_ids != participants:
        block_compile(state, op_id, PARTICIPANT_MISMATCH)
        record.error = f"compiled canvas_ids {canvas_ids} != participants {participants}"
        return "blocked"
    protocol_version = compiled.get("protocol_version", intent.protocol_version)
    body_limit = 2 * json_size(intent) + BODY_SLACK_BYTES
    body_size = len(json.dumps(compiled, separators=(",", ":"), default=str))
    if body_size > body_limit:
        block_compile(
            state,
            op_id,
            f"{INVALID_COMPILE_RESULT}: {body_size} bytes, more than twice its intent plus "
            f"{BODY_SLACK_BYTES} ({body_limit})",
        )
        return "blocked"
    body: dict[str, Any] = {k: v for k, v in compiled.items() if k not in COMPILE_ECHO_KEYS}
    body.update(
        id=request_id,
        ledger_id=state.ledger_id,
        operation_ids=[op_id],
        kind=compiled.get("kind") or intent.operation_type,
        payload=compiled.get("payload", intent.payload),
        canvas_ids=canvas_ids,
        expected_versions=dict(compiled.get("expected_versions") or {}),
        protocol_version=protocol_version,
        idempotency_key=request_id,
    )
    del state.compiling[op_id]
    request = RequestRecord(
        id=request_id,
        operation_ids=[op_id],
        operation_type=intent.operation_type,
        canvas_ids=canvas_ids,
        body=body,
        phase="in_flight",
    )
    state.requests[request_id] = request
    if protocol_version not in config.supported_protocol_versions:
        request.phase = RequestPhase.BLOCKED
        request.blocker = INTERPRETER_UNAVAILABLE
        _bump(counters_of(state).requests_blocked, INTERPRETER_UNAVAILABLE)
        _block_operation(
            record,
            [INTERPRETER_UNAVAILABLE],
            f"protocol_version {protocol_version} is not in {config.supported_protocol_versions}",
        )
        return "blocked"
    request.phase = RequestPhase.FROZEN  # not in progress while the gate counts slots
    if launch_refusal(state, config, request.operation_type) is not None and may_defer():
        request.launch = NEVER_LAUNCHED
        return "deferred"
    request.phase = RequestPhase.IN_FLIGHT
    return "launch"


# ---------------------------------------------------------------- the launch gate (L4, L11, L12)
#
# Every place a request may be sent (a compile's end, a relaunch, a grant, stop's final
# queries) asks `launch_refusal` first, and nothing of an unsupported protocol is ever handed
# to a request loop (`block_unsupported`).

# The `launch` of a request recorded by `freeze` but never started (see `freeze`).
NEVER_LAUNCHED = 0


def launch_refusal(state: LedgerState, config: LedgerConfig, operation_type: str) -> str | None:
    """Why no attempt of `operation_type` may start now, None when one may: the ledger is
    stopped, held (L12), or its concurrency or the type's lane is full (L4)."""
    if state.stopped:
        return "stopped"
    if state.holds:
        return "held"
    total, by_type = in_flight(state)
    if not _fits(config, total, by_type, operation_type):
        return "no_slot"
    return None


def protocol_supported(config: LedgerConfig, request: RequestRecord) -> bool:
    """Whether the request's protocol version is one the ledger may send (L11)."""
    return request.body.get("protocol_version") in config.supported_protocol_versions


def block_unsupported(
    state: LedgerState, config: LedgerConfig, allowed: Callable[[], bool] = lambda: True
) -> list[str]:
    """L11 after `configure` removed a protocol version (or a run recovered under settings
    without it): every request of that version that is not mid-attempt (frozen, or in flight
    waiting for its grant) is blocked `request_interpreter_unavailable` and is never sent
    again; `resume` leaves it blocked, `skip` ends it. Returns the requests in flight among
    them, whose waiting loop the shell must cancel. `allowed()` is asked only when there is
    something to block (a shell's patch)."""
    found = [
        r
        for r in state.requests.values()
        if (r.phase == "frozen" or (r.phase == "in_flight" and r.waiting))
        and not protocol_supported(config, r)
    ]
    if not found or not allowed():
        return []
    cancel: list[str] = []
    for request in found:
        if request.phase == "in_flight":
            cancel.append(request.id)
        request.phase = RequestPhase.BLOCKED
        request.waiting = False
        request.blocker = INTERPRETER_UNAVAILABLE
        _bump(counters_of(state).requests_blocked, INTERPRETER_UNAVAILABLE)
        version = request.body.get("protocol_version")
        for op_id in request.operation_ids:
            if op_id in state.operations:
                _block_operation(
                    state.operations[op_id],
                    [INTERPRETER_UNAVAILABLE],
                    f"protocol_version {version!r} is not in {config.supported_protocol_versions}",
                )
    return cancel


@dataclass(frozen=True)
class Pump:
    """What the ledger starts now (`pump`), in this order: cancel the loops of requests just
    blocked (L11), grant due retries, relaunch frozen requests, compile ready operations
    (each with the request ID reserved for it)."""

    cancel: list[str]
    grants: list[RequestRecord]
    launches: list[RequestRecord]
    dispatches: list[tuple[str, str]]


def pump(
    state: LedgerState,
    config: LedgerConfig,
    now_ms: int,
    new_request_id: Callable[[], str],
    protocol_gate: Callable[[], bool] = lambda: True,
) -> Pump:
    """The seed's `pump()`: due retries first (grants), then relaunches, then ready
    operations, each within the launch gate; the state records each (granted, launched,
    compiling) before the shell starts anything. With `local_compile`, one compile at a time:
    concurrent local activities resolve in completion order live but may be grouped otherwise
    on replay (sdk-python#1578, #1881), so the commands that follow them could change order."""
    if state.stopped:
        return Pump([], [], [], [])
    cancel = block_unsupported(state, config, protocol_gate)
    grants = [mark_granted(state, r) for r in plan_grants(state, config, now_ms)]
    launches = [mark_launched(state, r) for r in plan_launches(state, config)]
    dispatches: list[tuple[str, str]] = []
    for op_id in plan_dispatches(state, config):
        if config.local_compile and state.compiling:
            break
        request_id = new_request_id()
        begin_dispatch(state, op_id, request_id)
        dispatches.append((op_id, request_id))
    return Pump(cancel, grants, launches, dispatches)


def _echo_mismatch(compiled: dict[str, Any], op_id: str, request_id: str) -> str | None:
    """A compile result that names its operation or request must name the ones it was
    asked for: a result delivered to the wrong operation is never frozen."""
    echoed = {"operation_id": op_id, "request_id": request_id}
    for key, expected in echoed.items():
        if key in compiled and compiled[key] != expected:
            return f"compile result for {key} {compiled[key]!r} delivered to {expected!r}"
    return None


def _compile_result_problem(compiled: Any) -> str | None:
    if not isinstance(compiled, dict):
        return f"expected an object, got {compiled!r:.80}"
    canvases = compiled.get("canvas_ids", [])
    if not isinstance(canvases, list) or not all(isinstance(c, str) for c in canvases):
        return f"canvas_ids must be a list of strings, got {canvases!r:.80}"
    versions = compiled.get("expected_versions") or {}
    if not isinstance(versions, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in versions.items()
    ):
        return f"expected_versions must map canvas_id to int, got {versions!r:.80}"
    version = compiled.get("protocol_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        return f"protocol_version must be an int, got {version!r:.80}"
    kind = compiled.get("kind")
    if kind is not None and not isinstance(kind, str):
        return f"kind must be a string, got {kind!r:.80}"
    return None


def plan_launches(state: LedgerState, config: LedgerConfig) -> list[str]:
    """Frozen requests (resumed or interrupted) to start again, oldest operation first, within
    concurrency and lanes. Their canvases are already theirs."""
    if state.stopped or state.holds:
        return []
    total, by_type = in_flight(state)
    waiting = [r for r in state.requests.values() if r.phase == "frozen"]
    waiting.sort(key=lambda r: min(state.operations[o].sequence for o in r.operation_ids))
    chosen: list[str] = []
    for request in waiting:
        if not _fits(config, total, by_type, request.operation_type):
            continue
        chosen.append(request.id)
        by_type[request.operation_type] += 1
        total += 1
    return chosen


def mark_launched(state: LedgerState, request_id: str) -> RequestRecord:
    """The request's loop is starting again (same body, recorded action and attempt)."""
    request = state.requests[request_id]
    request.phase = RequestPhase.IN_FLIGHT
    request.blocker = None
    request.waiting = False
    request.launch += 1
    for op_id in request.operation_ids:
        record = state.operations[op_id]
        record.phase = OperationPhase.DISPATCHED
        record.blockers = []
        record.error = None
    return request


def request_input(
    state: LedgerState,
    config: LedgerConfig,
    ledger_id: str,
    request_id: str,
    wait_for_grants: bool = False,
) -> FrozenRequestInput:
    """The start input of a request's `FrozenRequest` loop: the ledger it reports to, its
    frozen body, where the loop resumes (recorded next action, attempt, retry time), the
    activities it calls, and whether it waits for grants between attempts."""
    request = state.requests[request_id]
    return FrozenRequestInput(
        ledger_id=ledger_id,
        request=request.body,
        next_action=request.retry_action,
        attempt=request.attempt,
        launch=request.launch,
        not_before=request.retry_at,
        submit_activity=config.submit_activity,
        query_activity=config.query_activity,
        complete_activity=config.complete_activity,
        activity_task_queue=config.activity_task_queue,
        retry=config.retry,
        wait_for_grants=wait_for_grants,
    )


def waiting_to_retry(state: LedgerState, request_ids: Iterable[str], now_ms: int) -> bool:
    """Each of these requests is in flight and sleeping until a retry, or waiting for a grant
    (it reports nothing before one): none is mid-attempt and none has reported its end (its
    loop's completion still to come)."""
    for request_id in request_ids:
        request = state.requests.get(request_id)
        if request is None or request.phase != "in_flight":
            return False  # reported; its completion event is still to come
        if request.waiting:
            continue
        if request.retry_at is None or request.retry_at <= now_ms:
            return False  # mid-attempt
    return True


# ---------------------------------------------------------------- submit/query (L7-L10)


def retry_delay_ms(attempt: int, retry: RetryConfig, retry_after_ms: int | None = None) -> int:
    """L8: `retry_after_ms` when given, else min(max, initial * coeff^min(attempt, 6)); >= 1."""
    if retry_after_ms is not None and retry_after_ms >= 0:
        return max(1, retry_after_ms)
    exponent = min(max(attempt, 0), MAX_BACKOFF_EXPONENT)
    try:
        computed = retry.initial_interval_ms * retry.backoff_coefficient**exponent
    except OverflowError:  # a huge (finite) coefficient: the maximum applies
        computed = float(retry.maximum_interval_ms)
    return max(1, int(min(float(retry.maximum_interval_ms), computed)))


def normalize_status(raw: Any) -> RequestStatus:
    """A submit/query answer; anything unrecognised is `unresolved` (L7)."""
    if isinstance(raw, RequestStatus):
        return raw
    if not isinstance(raw, dict):
        return RequestStatus(outcome="unresolved", error=f"unknown answer: {raw!r:.120}")
    try:
        return RequestStatus.model_validate(raw)
    except ValidationError as error:
        return RequestStatus(
            outcome="unresolved", error=format_validation_error("status", error)[:300]
        )


@dataclass(frozen=True)
class Step:
    """What a request does after one submit or query answer."""

    result: Literal["resolved", "blocked", "retry"]
    status: RequestStatus
    next_action: RequestAction
    delay_ms: int = 0
    retry_at: int | None = None


def next_step(
    action: RequestAction, raw_status: Any, attempt: int, retry: RetryConfig, now_ms: int
) -> Step:
    """L7-L10 after the `attempt`-th call (1-based, submits and queries counted).

    applied/rejected resolve; `blocked: true` blocks, and `resume` then queries (L13: a
    blocked submit was dispatched, its effect is unknown); otherwise after a submit or an
    `accepted` the next action is query, after a query that says `unresolved` it is submit,
    following the L8 delay.
    """
    status = normalize_status(raw_status)
    if status.outcome in ("applied", "rejected"):
        return Step("resolved", status, action)
    if status.blocked:
        return Step("blocked", status, RequestAction.QUERY)
    following: RequestAction = (
        RequestAction.QUERY
        if action == RequestAction.SUBMIT or status.outcome == "accepted"
        else RequestAction.SUBMIT
    )
    delay = retry_delay_ms(attempt, retry, status.retry_after_ms)
    return Step("retry", status, following, delay, now_ms + delay)


# A request loop that `stop` cancels mid-attempt (a submit, a query, or the completion after
# an answer) waits until that call has really ended at the far side before it ends
# (WAIT_CANCELLATION_COMPLETED): `stop`'s final query, which reuses the request's workflow
# ID, can then only start once nothing of the earlier attempt still runs (3.10).
WAIT_FOR_CANCELLED_ATTEMPTS = True


def answer_at_cancel(
    request_id: str, step: Step, attempt: int, launch: int | None
) -> RequestReport | None:
    """What a request loop cancelled while it completed an answer (`complete_activity`)
    reports before it ends: the answer, with `query` next (the ledger asks before deciding
    anything, 3.6). None for a step with no answer to keep."""
    if step.result != "resolved":
        return None
    return RequestReport(
        request_id=request_id,
        phase=RequestPhase.IN_FLIGHT,
        status=step.status.model_dump(mode="json", exclude_none=True),
        attempt=attempt,
        next_action=RequestAction.QUERY,
        launch=launch,
    )


# ---------------------------------------------------------------- completion hook (L9, L10)

# The blocker of a `complete_activity` that answered `{"blocked": true}` without an error.
COMPLETION_BLOCKED = "completion_blocked"
# The prefix of the blocker of a `complete_activity` that failed (after its retries) or
# answered something that is neither null nor a blocked answer.
COMPLETION_FAILED = "completion_failed"
# The keys of a blocked completion answer.
BLOCKED_ANSWER_KEYS = frozenset({"blocked", "error"})
# How much of an unexpected completion answer its blocker shows.
MAX_SHOWN_ANSWER = 120


def completion_blocker(answer: Any) -> str | None:
    """What a `complete_activity` answer means: None (null) accepts the resolution;
    `{"blocked": true, "error"?: str}` blocks with `error` (else `completion_blocked`); any
    other answer is a completion failure that blocks too, naming the answer (cut)."""
    if answer is None:
        return None
    blocked = isinstance(answer, dict) and answer.get("blocked") is True
    if blocked and set(answer) <= BLOCKED_ANSWER_KEYS:
        error = answer.get("error")
        if error is None or error == "":
            return COMPLETION_BLOCKED
        if isinstance(error, str):
            return error[:MAX_ERROR_LENGTH]
    shown = json.dumps(answer, separators=(",", ":"), default=str)
    if len(shown) > MAX_SHOWN_ANSWER:
        shown = shown[:MAX_SHOWN_ANSWER] + "..."
    return completion_failure(
        f'answered {shown}, expected null or {{"blocked": true, "error"?: str}}'
    )


def completion_failure(message: str) -> str:
    """The blocker of a `complete_activity` that failed: `completion_failed: <message>`."""
    return f"{COMPLETION_FAILED}: {message}"[:MAX_ERROR_LENGTH]


def completion_blocked(step: Step, reason: str) -> Step:
    """A resolved step whose completion refused it (or failed): the request blocks with
    `reason` (L10) and keeps its claims; `resume` queries again (L13) and completes again.
    The status keeps the far side's outcome, with `blocked` and the reason as its error."""
    status = step.status.model_copy(update={"blocked": True, "error": reason})
    return Step("blocked", status, RequestAction.QUERY)


def record_attempt(state: LedgerState, report: RequestReport) -> bool:
    """A non-final attempt of an in-flight request: keep attempt/retry_at/next action, and
    whether it now waits for a grant (its slot is free, L4). A report sent again by a request
    that waited long for its grant (see `FrozenRequest`) after the grant left changes nothing."""
    request = state.requests.get(report.request_id)
    if request is None or request.phase != "in_flight" or _stale(request, report):
        return False
    if report.awaiting_grant and not request.waiting and report.attempt <= request.attempt:
        return False  # granted already: its attempt is in progress
    _count_attempt(state, request, report)
    request.waiting = report.awaiting_grant
    request.attempt = report.attempt
    request.retry_at = report.retry_at
    request.retry_action = report.next_action
    request.last_status = bounded_status(report.status)
    return True


def finish(state: LedgerState, config: LedgerConfig, report: RequestReport) -> bool:
    """`record_finished`, then `compact` when it took effect: the shell's transition for a
    request's final report."""
    if not record_finished(state, report):
        return False
    compact(state, config)
    return True


def record_finished(state: LedgerState, report: RequestReport) -> bool:
    """A request's loop ended: resolved (L9) releases claims; blocked (L10) keeps them."""
    request = state.requests.get(report.request_id)
    if request is None or request.phase in ("resolved", "blocked") or _stale(request, report):
        return False
    _count_attempt(state, request, report)
    request.attempt = report.attempt
    request.retry_action = report.next_action
    request.last_status = bounded_status(report.status)
    request.retry_at = None
    request.waiting = False
    status = normalize_status(report.status)
    if report.phase == "resolved":
        request.phase = RequestPhase.RESOLVED
        _release_claims(state, request.id)
        state.resolved_total += len(request.operation_ids)
        _bump(counters_of(state).operations_resolved, status.outcome, len(request.operation_ids))
        for op_id in request.operation_ids:
            record = state.operations[op_id]
            record.phase = OperationPhase.RESOLVED
            record.outcome = status.outcome
            record.error = None if status.error is None else status.error[:MAX_ERROR_LENGTH]
            record.blockers = []
        return True
    # The far side's error, cut as the operations' copies are: carried with the request.
    reason = (status.error or "blocked")[:MAX_ERROR_LENGTH]
    request.phase = RequestPhase.BLOCKED
    request.blocker = reason
    for op_id in request.operation_ids:
        _block_operation(state.operations[op_id], [reason], reason)
    counters = counters_of(state)
    refusal = completion_refusal(status)
    _bump(counters.requests_blocked, "far_side" if refusal is None else "completion")
    if refusal is not None:
        _bump(counters.completion_refusals, refusal)
    return True


def request_workflow_ended(
    state: LedgerState, request_id: str, cancelled: bool, cause: str
) -> tuple[str, bool]:
    """How a request whose workflow ended without reporting is recorded: cancelled (only
    `stop` cancels one, or the launch gate's `block_unsupported`) or ended while stopping, as
    `stopped` (frozen); otherwise failed, blocked until `resume`. Returns the reason and
    whether it counts as stopped, for `request_interrupted`."""
    if cancelled:
        return "stopped", True
    return f"request_workflow_failed: {cause}", state.stopped


def request_interrupted(state: LedgerState, request_id: str, reason: str, stopped: bool) -> bool:
    """A request's loop ended without reporting (stopped, or its workflow failed).

    Stopped: back to `frozen` with its recorded next action (claims kept, it may have been
    sent). Failed: `blocked` with the reason, until `resume`.
    """
    request = state.requests.get(request_id)
    if request is None or request.phase != "in_flight":
        return False
    mid_attempt = not request.waiting
    request.waiting = False
    if stopped:
        request.phase = RequestPhase.FROZEN
        if mid_attempt and request.launch != NEVER_LAUNCHED:
            # Its submit (or the completion after an answer) may have reached the far side:
            # what it does next is ask (3.6, 3.10), never submit blind.
            request.retry_action = RequestAction.QUERY
        return True
    request.phase = RequestPhase.BLOCKED
    request.blocker = reason[:MAX_ERROR_LENGTH]
    for op_id in request.operation_ids:
        _block_operation(state.operations[op_id], [reason], reason)
    _bump(counters_of(state).requests_blocked, reason.split(":", 1)[0])
    return True


# ---------------------------------------------------------------- counters (the snapshot's)

# A counter keyed by a kind keeps at most MAX_COUNTER_KINDS kinds (a new one past them counts
# as `other`), each cut to MAX_COUNTER_KIND characters: the kinds are the ledger's own words,
# this only guards the carried state.
MAX_COUNTER_KINDS = 16
MAX_COUNTER_KIND = 40


def counters_of(state: LedgerState) -> LedgerCounters:
    """The state's counters. State carried from a build before them starts them from what
    it knows (every operation ever enqueued took a sequence): `read_start` seeds them as the
    state comes, before anything changes it."""
    if state.counters is None:
        state.counters = LedgerCounters(operations_enqueued=state.next_sequence - 1)
    return state.counters


def _bump(counts: dict[str, int], kind: str, amount: int = 1) -> None:
    kind = str(kind)[:MAX_COUNTER_KIND]
    if kind not in counts and len(counts) >= MAX_COUNTER_KINDS:
        kind = "other"
    counts[kind] = counts.get(kind, 0) + amount


def completion_refusal(status: RequestStatus) -> str | None:
    """`refused` or `failed` when this blocked status is a `complete_activity` that blocked a
    resolution (`completion_blocked` keeps the far side's applied/rejected, which the far side
    itself can never answer with `blocked`), else None."""
    if not status.blocked or status.outcome not in ("applied", "rejected"):
        return None
    return "failed" if (status.error or "").startswith(COMPLETION_FAILED) else "refused"


def attempt_answer(status: RequestStatus) -> str:
    """What one submit or query answered, as `request_attempts` counts it: applied, rejected,
    accepted, blocked, unresolved, transport (the call failed) or unknown (unreadable)."""
    if completion_refusal(status) is not None or (
        status.outcome in ("applied", "rejected", "accepted") and not status.blocked
    ):
        return str(status.outcome)
    if status.blocked:
        return "blocked"
    error = status.error or ""
    if error.startswith("transport:"):
        return "transport"
    if error.startswith(("unknown answer", "invalid status")):
        return "unknown"
    return "unresolved"


def _count_attempt(state: LedgerState, request: RequestRecord, report: RequestReport) -> None:
    """Count the attempt a report tells of, once: a report of an attempt already counted (a
    reminder sent again while it waits for its grant) counts nothing."""
    if report.attempt > request.attempt:
        answer = attempt_answer(normalize_status(report.status))
        _bump(counters_of(state).request_attempts, answer)


# ---------------------------------------------------------------- operator actions


def resume(state: LedgerState, config: LedgerConfig) -> list[str]:
    """L13: blocked requests (supported protocol) become frozen to be relaunched with their
    recorded action; operations blocked at compile go back to pending. Returns touched IDs."""
    touched: list[str] = []
    for request in state.requests.values():
        if request.phase != "blocked":
            continue
        if request.body.get("protocol_version") not in config.supported_protocol_versions:
            continue
        request.phase = RequestPhase.FROZEN
        request.blocker = None
        touched.append(request.id)
    for record in state.operations.values():
        if record.phase != "blocked" or record.request_id is not None:
            continue
        if any(b in PERMANENT_BLOCKERS for b in record.blockers):
            continue
        record.phase = OperationPhase.PENDING
        record.blockers = []
        record.error = None
        touched.append(record.intent.id)
    return touched


def check_running(state: LedgerState) -> None:
    """`hold`, `resume`, `settle` and `stop` are refused by a stopped ledger."""
    if state.stopped:
        raise LedgerStopped("ledger is stopped")


def validate_empty(state: LedgerState, message: str, raw: Any) -> EmptyInput:
    """`resume` / `settle` / `stop`: `{}` (or nothing) on a running ledger."""
    check_running(state)
    try:
        return EmptyInput.model_validate({} if raw is None else raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error(f"{message} input", error)) from None


def parse_release(raw: Any) -> ReleaseInput:
    """`release`: `{"token": str}`. As a signal, a token not held is dropped when released."""
    try:
        return ReleaseInput.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("release input", error)) from None


def validate_release(state: LedgerState, raw: Any) -> ReleaseInput:
    """`release` as an update: the token must be one currently held."""
    release = parse_release(raw)
    if release.token not in state.holds:
        raise InvalidRequest(f"invalid release input: token {release.token!r:.80} is not held")
    return release


def validate_skip(state: LedgerState, raw: Any) -> SkipInput:
    """`skip`: `{"operation_id", "reason"?}` naming an operation `check_skip` allows."""
    try:
        parsed = SkipInput.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("skip input", error)) from None
    check_skip(state, parsed.operation_id)
    return parsed


def parse_report(raw: Any) -> RequestReport:
    """A `FrozenRequest`'s report (its `request_progress` / `request_finished`, its result)."""
    try:
        return RequestReport.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("request report", error)) from None


def check_skip(state: LedgerState, op_id: str) -> OperationRecord:
    """A skip is allowed for a known operation that is pending or blocked and not in flight,
    on a ledger that is not stopping (its final queries may be asking about it)."""
    check_running(state)
    record = state.operations.get(op_id)
    if record is None and op_id in state.forgotten:
        raise InvalidRequest(f"invalid skip input: operation {op_id!r} is already resolved")
    if record is None:
        raise InvalidRequest(f"invalid skip input: operation_id {op_id!r} is not known")
    if record.phase == "resolved":
        raise InvalidRequest(f"invalid skip input: operation {op_id!r} is already resolved")
    if op_id in state.compiling:
        raise InvalidRequest(f"invalid skip input: operation {op_id!r} is compiling")
    request = state.requests.get(record.request_id or "")
    if request is not None and request.phase == "in_flight":
        raise InvalidRequest(
            f"invalid skip input: operation {op_id!r} has request {request.id!r} in flight"
        )
    return record


def skip_and_compact(state: LedgerState, config: LedgerConfig, op_id: str, reason: str) -> None:
    """`skip`, then `compact`: the shell's transition for the `skip` message."""
    skip(state, op_id, reason)
    compact(state, config)


def skip(state: LedgerState, op_id: str, reason: str) -> None:
    """Resolve a stuck operation as `skipped` (see module docstring), releasing its canvases."""
    record = check_skip(state, op_id)
    request = state.requests.get(record.request_id or "")
    if request is not None:
        request.phase = RequestPhase.RESOLVED
        request.blocker = None
        request.last_status = {"outcome": SKIPPED, "error": reason}
        _release_claims(state, request.id)
    record.phase = OperationPhase.RESOLVED
    record.outcome = SKIPPED
    state.resolved_total += 1
    _bump(counters_of(state).operations_resolved, SKIPPED)
    record.error = reason
    record.blockers = []


def stop(state: LedgerState) -> None:
    """Stop dispatching for good: nothing is launched from now on."""
    state.stopped = True


# ---------------------------------------------------------------- stop: forget nothing
#
# `stop` cancels what is in flight, then asks the far side once (a query with the frozen body
# and its key) about each request whose submit may have reached it, within a bound: at most
# `query_limit` (<= MAX_STOP_QUERIES) requests, oldest operation first, at most
# `concurrency` at a time, each with the activity timeout, all within `query_deadline_ms`
# (<= MAX_STOP_QUERY_DEADLINE_MS). `applied`/`rejected` resolves the request; whatever stays
# unknown is listed in the final result's `unknown` with its frozen body.

# Stop answers that are not outcomes: the query ended without an answer (transport error,
# timeout, its workflow failed, the deadline), or the far side answered `blocked`.
NO_ANSWER = "no_answer"
NOT_ASKED = "not_asked"
# The final result's `unknown` list carries each request's frozen body and last status while
# the list stays under this many bytes as JSON; past it, entries name the request, its
# operations, attempt and next action only (`request_left_out`): the body is then read from
# the start input of the request's workflow (`request:<ledger_id>:<request_id>`). With the
# snapshot page (at most 200 operations and their requests) the final result stays well under
# 2 MB (tests/ledger/test_ledger_stop_core.py measures the worst cases).
MAX_UNKNOWN_BYTES = 384 * 1024


def parse_stop(raw: Any) -> StopInput:
    """`stop`: `{}` or `{"query_limit"?, "query_deadline_ms"?}` (see `StopInput`)."""
    try:
        return StopInput.model_validate({} if raw is None else raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("stop input", error)) from None


def validate_stop(state: LedgerState, raw: Any) -> StopInput:
    """`stop` as its validator checks it: once, on a running ledger, with a valid payload."""
    check_running(state)
    return parse_stop(raw)


def begin_stop(state: LedgerState, raw: Any) -> StopInput:
    """`stop`'s handler: stop (`stop`), and the bound its final queries keep. A payload the
    validator let through always parses; one recorded before `StopInput` existed that does
    not (no client sent one) takes the defaults."""
    stop(state)
    try:
        return parse_stop(raw)
    except InvalidRequest:
        return StopInput()


def may_have_reached_far_side(request: RequestRecord) -> bool:
    """Whether a request's submit may have reached the far side, so its outcome is unknown
    until asked: every unresolved request but one blocked at freeze because its protocol
    version is unsupported (`request_interpreter_unavailable` with no attempt), whose body
    was never handed to a request workflow. A request in flight at stop counts, mid-submit
    included (its first attempt may have been sent without a report yet), and so does one
    blocked (a `blocked` answer, or its workflow failed) or frozen by a resume. Operations
    pending, held, compiling or blocked at compile have no request at all: never asked."""
    if request.phase == "resolved" or request.launch == NEVER_LAUNCHED:
        return False
    # Blocked at freeze: no attempt, and nothing since made its next action a query (a loop
    # interrupted mid-attempt, `request_interrupted`, would have).
    return not (
        request.attempt == 0
        and request.blocker == INTERPRETER_UNAVAILABLE
        and request.retry_action == RequestAction.SUBMIT
    )


def _request_sequence(state: LedgerState, request: RequestRecord) -> int:
    known = [state.operations[o].sequence for o in request.operation_ids if o in state.operations]
    return min(known, default=0)


def unknown_candidates(state: LedgerState) -> list[str]:
    """The requests `may_have_reached_far_side`, oldest operation first."""
    candidates = [q for q in state.requests.values() if may_have_reached_far_side(q)]
    candidates.sort(key=lambda q: _request_sequence(state, q))
    return [q.id for q in candidates]


def plan_stop_queries(
    state: LedgerState, bound: StopInput, config: LedgerConfig | None = None
) -> list[str]:
    """The requests `stop` asks, in order: the first `query_limit` candidates (none when
    the deadline is 0), leaving out those of a protocol version `config` no longer
    supports (L11: never sent; listed `not_asked`). Called once nothing is in flight."""
    if bound.query_deadline_ms == 0:
        return []
    candidates = unknown_candidates(state)
    if config is not None:
        candidates = [r for r in candidates if protocol_supported(config, state.requests[r])]
    return candidates[: bound.query_limit]


def stop_queries_to_start(
    queue: list[str], asking: int, config: LedgerConfig, deadline_passed: bool
) -> list[str]:
    """Which of the planned final queries start now: none once the deadline passed, else the
    next ones while fewer than `concurrency` are asking. Removes them from `queue`."""
    if deadline_passed:
        return []
    room = max(0, config.concurrency - asking)
    chosen, queue[:] = queue[:room], queue[room:]
    return chosen


def cancel_at_stop(state: LedgerState, running_here: Iterable[str]) -> list[str]:
    """Requests in flight at `stop` that this run of the ledger did not start (an earlier run,
    before continue-as-new): the shell cancels them by workflow ID and records each frozen
    (`request_interrupted`) once its last report arrived (`awaiting_final_reports`; a cancel
    only asks, the request may still be sending) or the wait for it timed out."""
    local = set(running_here)
    chosen = [r.id for r in state.requests.values() if r.phase == "in_flight" and r.id not in local]
    state.awaiting_final_reports = sorted(set(state.awaiting_final_reports) | set(chosen))
    return chosen


def cancel_by_id(state: LedgerState, request_id: str) -> None:
    """The shell cancels a request an earlier run started (no handle: by workflow ID, when
    the core blocked it): a `stop` from now on waits for its last report too."""
    if request_id not in state.awaiting_final_reports:
        state.awaiting_final_reports.append(request_id)


def final_report_arrived(state: LedgerState, request_id: str) -> bool:
    """A request's last report arrived (`request_ended`: a cancelled request sends it after
    any other report, a `request_finished` included), or its workflow was found closed:
    `stop` no longer waits for it. False when it was not awaited."""
    if request_id not in state.awaiting_final_reports:
        return False
    state.awaiting_final_reports.remove(request_id)
    return True


def stop_waits_for_reports(state: LedgerState) -> bool:
    """Whether `stop` still waits for the last report of a request it cancelled by ID."""
    return bool(state.awaiting_final_reports)


def final_reports_given_up(state: LedgerState) -> list[str]:
    """`stop`'s wait for last reports timed out (a request terminated from outside never
    reports): those still awaited are given up, and returned."""
    given_up, state.awaiting_final_reports = state.awaiting_final_reports, []
    return given_up


def begin_stop_query(state: LedgerState, request_id: str) -> bool:
    """The request's final query starts: it is in flight (so `skip` refuses it) under a new
    launch (a late report of the loop `stop` cancelled is stale), and what comes next for it
    is a query, asked now. False (nothing changes, nothing is to be asked) when the request
    is no longer one whose outcome is unknown (resolved, or gone)."""
    request = state.requests.get(request_id)
    if request is None or request.phase == "in_flight" or not may_have_reached_far_side(request):
        return False
    request.phase = RequestPhase.IN_FLIGHT
    request.launch += 1
    request.retry_at = None
    request.retry_action = RequestAction.QUERY
    return True


def stop_query_input(
    state: LedgerState, config: LedgerConfig, ledger_id: str, request_id: str
) -> FrozenRequestInput:
    """The start input of a request's final query: its `FrozenRequest` in `final_query`
    mode (one query with the frozen body, no retry, no wait for its retry time)."""
    return request_input(state, config, ledger_id, request_id).model_copy(
        update={"final_query": True, "next_action": RequestAction.QUERY, "not_before": None}
    )


def record_stop_query(state: LedgerState, report: RequestReport) -> str | None:
    """A final query answered: `applied`/`rejected` resolves the request (claims released),
    `blocked` blocks it, anything else leaves it as it was (`_phase_before_stop_query`)
    with that status; its next action stays `query`. Returns what it gave (also kept in
    `stop_answers`), None for a report of no request being asked."""
    request = state.requests.get(report.request_id)
    if request is None or request.phase != "in_flight" or _stale(request, report):
        return None
    status = normalize_status(report.status)
    if report.phase in ("resolved", "blocked"):
        record_finished(state, report.model_copy(update={"next_action": RequestAction.QUERY}))
        answer = status.outcome.value if report.phase == "resolved" else "blocked"
    else:
        request.attempt = report.attempt
        request.last_status = bounded_status(report.status)
        request.phase = _phase_before_stop_query(request)
        answer = status.outcome.value
    state.stop_answers[request.id] = answer
    return answer


def stop_query_unanswered(state: LedgerState, request_id: str) -> None:
    """A final query ended without an answer (its workflow failed or was cancelled, the
    deadline): the request goes back to frozen, its next action `query`, its last status
    the one it had."""
    request = state.requests.get(request_id)
    if request is None or request.phase != "in_flight":
        return
    request.phase = _phase_before_stop_query(request)
    state.stop_answers[request_id] = NO_ANSWER


def _phase_before_stop_query(request: RequestRecord) -> RequestPhase:
    """A request its final query left unresolved: blocked again when it was blocked (its
    blocker is kept), else frozen, as `stop` leaves a request it cancelled."""
    return RequestPhase.BLOCKED if request.blocker is not None else RequestPhase.FROZEN


def final_result(state: LedgerState) -> dict[str, Any]:
    """What a stopped ledger completes with: its snapshot (first page), the requests its
    final queries resolved (`resolved_at_stop`) and every request whose outcome stays
    unknown (`unknown`, see `unknown_requests`)."""
    result = snapshot(state)
    resolved: list[dict[str, Any]] = []
    for request_id, answer in state.stop_answers.items():
        request = state.requests.get(request_id)
        if request is not None and request.phase == "resolved":
            resolved.append(
                {
                    "request_id": request_id,
                    "operation_ids": list(request.operation_ids),
                    "outcome": answer,
                }
            )
    result["resolved_at_stop"] = resolved
    result["unknown"] = unknown_requests(state)
    return result


def unknown_requests(state: LedgerState) -> list[dict[str, Any]]:
    """Each request whose submit may have reached the far side and is not resolved, oldest
    operation first: `request_id`, `operation_ids`, `request` (the frozen body, with its
    `idempotency_key`), `next_action` (`query`: ask the far side by its key), `attempt`,
    `last_status`, and `at_stop`: what the final query gave (`accepted`, `unresolved`,
    `blocked`, `no_answer`) or `not_asked` (past the limit or the deadline). Bodies and
    statuses are kept while the list stays under MAX_UNKNOWN_BYTES, then left out."""
    entries: list[dict[str, Any]] = []
    used = 2
    for request_id in unknown_candidates(state):
        request = state.requests[request_id]
        entry: dict[str, Any] = {
            "request_id": request.id,
            "operation_ids": list(request.operation_ids),
            "request": request.body,
            "next_action": RequestAction.QUERY.value,
            "attempt": request.attempt,
            "last_status": request.last_status,
            "at_stop": state.stop_answers.get(request.id, NOT_ASKED),
        }
        size = len(json.dumps(entry, separators=(",", ":"), default=str)) + 1
        if used + size > MAX_UNKNOWN_BYTES:
            entry.update(request=None, last_status=None, request_left_out=True)
            size = len(json.dumps(entry, separators=(",", ":"), default=str)) + 1
        used += size
        entries.append(entry)
    return entries


def count_dropped_signal(state: LedgerState) -> int:
    """A signal could not be applied and was dropped; returns the count so far."""
    state.dropped_signals += 1
    return state.dropped_signals


# At most this many hold tokens are outstanding at once (each is carried in the state).
MAX_HOLDS = 64


def parse_hold(raw: Any) -> HoldInput:
    """`hold`: `{}` (or nothing), or `{"token": str}`, the caller's own token."""
    try:
        return HoldInput.model_validate({} if raw is None else raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("hold input", error)) from None


def hold_token(raw: Any, generated: str) -> str:
    """The token a `hold` its validator accepted takes: the caller's, else `generated` (a
    payload recorded before `HoldInput` existed, when `hold` ignored it, takes `generated`)."""
    try:
        return parse_hold(raw).token or generated
    except InvalidRequest:
        return generated


def validate_hold(state: LedgerState, raw: Any) -> HoldInput:
    """`hold` on a running ledger: a token already held is taken again (nothing changes);
    a new one is refused past MAX_HOLDS outstanding."""
    check_running(state)
    parsed = parse_hold(raw)
    if parsed.token not in state.holds and len(state.holds) >= MAX_HOLDS:
        raise InvalidRequest(
            f"invalid hold input: {len(state.holds)} hold tokens are outstanding, the most "
            f"a ledger keeps: release one (the snapshot's hold_tokens lists them)"
        )
    return parsed


def hold(state: LedgerState, token: str) -> str:
    """L12: no new launch until every token is released. Idempotent: a token already held
    changes nothing. Returns the token."""
    if token not in state.holds:
        state.holds.append(token)
    return token


def release(state: LedgerState, token: str) -> bool:
    """Release one hold token; False when it was not held."""
    if token not in state.holds:
        return False
    state.holds.remove(token)
    return True


def recover(state: LedgerState) -> None:
    """L14, before anything is sent: drop compile reservations (nothing was recorded for
    them) and rebuild claims from unresolved requests, refusing two claims on one canvas."""
    for op_id in list(state.compiling):
        record = state.operations[op_id]
        record.phase = OperationPhase.PENDING
        record.request_id = None
    state.compiling = {}
    claims: dict[str, str] = {}
    for request in state.requests.values():
        if request.phase == "resolved":
            continue
        for canvas in request.canvas_ids:
            holder = claims.get(canvas)
            if holder is not None and holder != request.id:
                raise RecoveryConflictError(
                    f"recovery_claim_conflict: canvas {canvas!r} is claimed by unresolved "
                    f"requests {holder!r} and {request.id!r}"
                )
            claims[canvas] = request.id
    state.claims = claims


# ---------------------------------------------------------------- runs: start, continue-as-new


@dataclass(frozen=True)
class Start:
    """What a run of the ledger starts from (see `read_start`)."""

    config: LedgerConfig
    ledger_id: str
    state: LedgerState
    # Why the start input is refused (the run fails once with it), None when it is not.
    error: str | None = None
    # A setting only a lax reading accepts (see `workflows.validation`), None when none.
    coerced: str | None = None
    # Why the ID is refused by its characters (empty, blank, spaces around it, control
    # characters), for a run started afresh; runs recorded before keep it.
    bad_id: str | None = None


def read_start(read: Callable[[], Any], workflow_id: str) -> Start:
    """The start input as `read()` decodes it (ValueError when it cannot be decoded). A bad
    input still gives settings, an ID and a state (defaults) with the `error` that names the
    field. The ledger ID defaults to the workflow ID's (`ledger:<ledger_id>`)."""
    start, error, coerced = read_start_input(
        "OperationLedger input", read, LedgerInput, LedgerConfig, "carried_state"
    )
    config = LedgerConfig.model_validate(
        {**start.model_dump(exclude={"carried_state"}), "ledger_id": start.ledger_id},
        context=CARRIED_CONTEXT if start.carried_state is not None else None,
    )
    ledger_id = start.ledger_id or workflow_id.removeprefix(LEDGER_ID_PREFIX)
    problem = id_problem("ledger_id", ledger_id)
    if problem is not None:
        error = error or f"invalid OperationLedger input: {problem}"
        ledger_id = ledger_id[:100]
    # A run continued as new carries its state: its ID was taken when it first started.
    bad_form = None if start.carried_state else id_form_problem("ledger_id", ledger_id)
    bad_id = None if bad_form is None else f"invalid OperationLedger input: {bad_form}"
    state = start.carried_state or LedgerState(ledger_id=ledger_id)
    counters_of(state)  # seeded now, from the state as it came
    return Start(config, ledger_id, state, error, coerced, bad_id)


# Start fields `configure` cannot change, each with why (docs/contract.md 3.3).
FIXED_SETTINGS = {
    "ledger_id": "it names the ledger and its requests' workflow IDs",
    "carried_state": "it is internal: the state a run carries across continue-as-new",
    "continue_as_new_after_events": "it is not part of the wire contract (set at start only)",
    "local_compile": "it is not part of the wire contract (set at start only)",
    "own_retry_timers": "it is not part of the wire contract (set at start only)",
}
# Start fields the `settings` query leaves out: not part of the wire contract.
INTERNAL_SETTINGS = frozenset({"continue_as_new_after_events", "local_compile", "own_retry_timers"})


def parse_configure(raw: Any, current: LedgerConfig) -> LedgerConfig:
    """Validate a `configure` payload (a partial start input) against the `current`
    settings: the settings it leaves, or InvalidRequest naming the field and the value."""
    return configured("configure", current, raw, FIXED_SETTINGS)


def validate_configure(state: LedgerState, raw: Any, current: LedgerConfig) -> LedgerConfig:
    """`parse_configure` on a running ledger (a stopped one takes no `configure`), refusing
    `participant_free_types` without the type of an operation with no participants that has
    no frozen request yet (it could then never dispatch, L5)."""
    check_running(state)
    config = parse_configure(raw, current)
    for record in state.operations.values():
        intent = record.intent
        if (
            record.phase != "resolved"
            and record.request_id not in state.requests  # not frozen yet: may dispatch again
            and not canvases_of(intent)
            and intent.operation_type not in config.participant_free_types
        ):
            raise InvalidRequest(
                f"invalid configure: participant_free_types {config.participant_free_types!r:.200} "
                f"leaves out {intent.operation_type!r:.80}, the type of operation "
                f"{intent.id!r:.80}, which has no participants and is not resolved"
            )
    return config


def settings_of(config: LedgerConfig, ledger_id: str) -> dict[str, Any]:
    """The `settings` query: the start input's public fields, as in effect (`ledger_id` the
    ledger's, also when it came from the workflow ID)."""
    return {**settings_view(config, INTERNAL_SETTINGS), "ledger_id": ledger_id}


def next_run_input(state: LedgerState, config: LedgerConfig, ledger_id: str) -> LedgerInput:
    """The input of the run that continues this one: its settings, ID and whole state,
    compacted first.

    `local_compile` and `own_retry_timers` while off and `complete_activity` while null are
    left out (the next run re-applies their defaults), so a run continued by an upgraded worker
    still starts on a worker that does not know them yet (a rolling upgrade).
    """
    compact(state, config)
    left_out = {"ledger_id"}
    if not config.local_compile:
        left_out.add("local_compile")
    if config.complete_activity is None:
        left_out.add("complete_activity")
    if not config.own_retry_timers:
        left_out.add("own_retry_timers")
    return LedgerInput.model_validate(
        {**config.model_dump(exclude=left_out), "ledger_id": ledger_id, "carried_state": state},
        context=CARRIED_CONTEXT,
    )


# ---------------------------------------------------------------- views


def phase_counts(state: LedgerState) -> dict[str, int]:
    """How many operations are in each phase (only phases that have some)."""
    counts: dict[str, int] = {}
    for record in state.operations.values():
        counts[record.phase] = counts.get(record.phase, 0) + 1
    return dict(sorted(counts.items()))


def details(state: LedgerState) -> str:
    """Markdown for the UI's "Current Details": operations per phase, claims and holds."""
    counts = ", ".join(f"{count} {phase}" for phase, count in phase_counts(state).items())
    head = "**Stopped.** " if state.stopped else "**Held.** " if state.holds else ""
    return (
        f"{head}Operations: {counts or 'none'}  \n"
        f"Canvases claimed: {len(state.claims)}; holds: {len(state.holds)}"
    )


def parse_snapshot_query(raw: Any) -> SnapshotQuery:
    try:
        return SnapshotQuery.model_validate(raw or {})
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("snapshot query", error)) from None


def counts(state: LedgerState) -> dict[str, Any]:
    """Operations and requests per phase, how many resolved IDs are remembered, and how many
    operations were resolved since the ledger began."""
    requests: Counter[str] = Counter(q.phase for q in state.requests.values())
    return {
        "operations": phase_counts(state),
        "requests": dict(sorted(requests.items())),
        "forgotten": len(state.forgotten),
        "resolved_total": state.resolved_total,
    }


def snapshot(state: LedgerState, query: SnapshotQuery | None = None) -> dict[str, Any]:
    """The `snapshot` query: one page of operations in sequence order with their requests,
    the counts per phase, claims and holds. `next_after` is the cursor of the next page."""
    query = query or SnapshotQuery()
    matching = (
        r
        for r in state.operations.values()
        if (query.phase is None or r.phase == query.phase)
        and (query.after is None or r.sequence > query.after)
    )
    page: list[OperationRecord] = []
    more = False
    for record in matching:
        if len(page) == query.limit:
            more = True
            break
        page.append(record)
    request_ids = {r.request_id for r in page if r.request_id is not None}
    return {
        "ledger_id": state.ledger_id,
        "stopped": state.stopped,
        "held": bool(state.holds),
        "holds": len(state.holds),
        "hold_tokens": list(state.holds),
        "dropped_signals": state.dropped_signals,
        "signal_conflicts": state.signal_conflicts,
        "counts": counts(state),
        "counters": (state.counters or LedgerCounters()).model_dump(mode="json"),
        "operations": [
            {
                "id": r.intent.id,
                "operation_type": r.intent.operation_type,
                "sequence": r.sequence,
                "phase": r.phase,
                "blockers": list(r.blockers),
                "waiting_for": waiting_for(state, r),
                "request_id": r.request_id,
                "outcome": r.outcome,
                "error": r.error,
            }
            for r in page
        ],
        "next_after": page[-1].sequence if more else None,
        "requests": [
            {
                "id": q.id,
                "operation_ids": list(q.operation_ids),
                "phase": q.phase,
                "attempt": q.attempt,
                "retry_at": q.retry_at,
                "retry_action": q.retry_action,
                "waiting": q.waiting,
                "canvas_ids": list(q.canvas_ids),
                "blocker": q.blocker,
                "last_status": q.last_status,
            }
            for q in state.requests.values()
            if q.id in request_ids
        ],
        "claims": dict(state.claims),
    }


def compact(state: LedgerState, config: LedgerConfig) -> list[str]:
    """Keep the carried state bounded: resolved operations keep no intent payload, their
    requests no body; past `retention.resolved_operations` the oldest (by sequence) leave
    the state with their requests and are remembered by ID only, up to
    `retention.remembered_ids`. Returns the IDs that left."""
    retention = config.retention
    resolved = [r for r in state.operations.values() if r.phase == "resolved"]
    for record in resolved:
        intent = record.intent
        if intent.payload is not None or intent.participants or intent.dependencies:
            record.intent = OperationIntent(id=intent.id, operation_type=intent.operation_type)
    for request in state.requests.values():
        if request.phase == "resolved" and request.body:
            request.body = {}
    leaving = resolved[: max(0, len(resolved) - retention.resolved_operations)]
    for record in leaving:
        del state.operations[record.intent.id]
        state.forgotten[record.intent.id] = record.outcome or ""
        retired = state.requests.get(record.request_id or "")
        if (
            retired is not None
            and retired.phase == "resolved"
            and not any(op in state.operations for op in retired.operation_ids)
        ):
            del state.requests[retired.id]
    while len(state.forgotten) > retention.remembered_ids:
        del state.forgotten[next(iter(state.forgotten))]
    return [record.intent.id for record in leaving]


def bounded_status(status: dict[str, Any]) -> dict[str, Any]:
    """A submit/query status as recorded: whole when small, else its outcome and error."""
    if len(json.dumps(status, separators=(",", ":"), default=str)) <= MAX_STATUS_BYTES:
        return status
    kept: dict[str, Any] = {
        k: status[k] for k in ("outcome", "retry_after_ms", "blocked") if k in status
    }
    error = status.get("error")
    if isinstance(error, str):
        kept["error"] = error[:MAX_ERROR_LENGTH]
    return {**kept, "truncated": True}


def settled(state: LedgerState) -> bool:
    """Nothing compiling or in flight and every operation resolved or blocked."""
    total, _ = in_flight(state)
    return total == 0 and all(r.phase in ("resolved", "blocked") for r in state.operations.values())


# ---------------------------------------------------------------- internals


def _stale(request: RequestRecord, report: RequestReport) -> bool:
    """A report from an earlier loop of a request that was since relaunched (resume)."""
    return report.launch is not None and report.launch != request.launch


def _block_operation(record: OperationRecord, blockers: list[str], error: str) -> None:
    record.phase = OperationPhase.BLOCKED
    record.blockers = [blocker[:MAX_ERROR_LENGTH] for blocker in blockers]
    record.error = error[:MAX_ERROR_LENGTH]


def _release_claims(state: LedgerState, request_id: str) -> None:
    for canvas in [c for c, holder in state.claims.items() if holder == request_id]:
        del state.claims[canvas]
