"""Dispatch (pure, L3-L6): which operations compile, which requests launch or are granted a
slot (`pump`), and the freezing of a compiled request before anything is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from workflows.ledger.models import (
    FrozenRequestInput,
    LedgerConfig,
    LedgerState,
    OperationPhase,
    OperationRecord,
    RequestPhase,
    RequestRecord,
)
from workflows.ledger.records import (
    INTERPRETER_UNAVAILABLE,
    INVALID_COMPILE_RESULT,
    MAX_ERROR_LENGTH,
    MISSING_PARTICIPANTS,
    NEVER_LAUNCHED,
    PARTICIPANT_MISMATCH,
    RecoveryConflictError,
    block_operation,
    bump,
    canvases_of,
    counters_of,
    fits,
    in_flight,
    is_resolved,
    json_size,
    release_claims,
    request_sequence,
)
from workflows.validation import InvalidRequest as InvalidRequest

# A frozen body may be at most this much larger than twice its intent (see freeze).
BODY_SLACK_BYTES = 4096
# A compile result whose `operation_id` / `request_id` names another operation or request.
COMPILE_RESULT_MISMATCH = "compile_result_mismatch"
# The prefix of the blocker of a compile that failed transiently for its whole retry window.
COMPILE_UNAVAILABLE = "compile_unavailable"
# Keys a compile activity may return to name what it compiled; checked, not frozen.
COMPILE_ECHO_KEYS = frozenset({"operation_id", "request_id"})


def _waiting(state: LedgerState) -> list[RequestRecord]:
    """Requests in flight that wait for a grant, in the seed's retry order: due time, then
    sequence."""
    waiting = [r for r in state.requests.values() if r.phase == "in_flight" and r.waiting]
    waiting.sort(key=lambda r: (r.retry_at or 0, request_sequence(state, r)))
    return waiting


def plan_grants(state: LedgerState, config: LedgerConfig, now_ms: int) -> list[str]:
    """Waiting requests whose retry is due, to re-launch now (same body, key and recorded next
    action, L7), in (retry time, sequence) order, within concurrency and lanes counting only
    attempts in progress (L4). A due retry its lane refuses waits, and the next may go (the
    seed's `deferredRetries`). Nothing while held or stopped (L12)."""
    if state.stopped or state.holds:
        return []
    return _within_slots(state, config, _waiting(state), due_by=now_ms)


def _within_slots(
    state: LedgerState,
    config: LedgerConfig,
    candidates: list[RequestRecord],
    due_by: int | None = None,
) -> list[str]:
    """The IDs of `candidates`, in order, that concurrency and lanes admit, counting only
    attempts in progress (L4): one a lane refuses is passed over and the next may go. With
    `due_by`, the first candidate whose retry is due later ends the list."""
    total, by_type = in_flight(state)
    chosen: list[str] = []
    for request in candidates:
        if due_by is not None and (request.retry_at or 0) > due_by:
            break
        if total >= config.concurrency:
            break
        if not fits(config, total, by_type, request.operation_type):
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
        and fits(config, total, by_type, r.operation_type)
    ]
    return min(due, default=None)


def is_ready(state: LedgerState, record: OperationRecord) -> bool:
    """Pending, not blocked, not compiling, and every dependency resolved (L3)."""
    if record.phase != "pending" or record.blockers or record.intent.id in state.compiling:
        return False
    return all(is_resolved(state, dependency) for dependency in record.intent.dependencies)


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
            block_operation(record, [MISSING_PARTICIPANTS], "operation has no participants")
            continue
        if not fits(config, total, by_type, intent.operation_type):
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
    release_claims(state, request_id)
    record = state.operations[op_id]
    record.phase = OperationPhase.PENDING
    record.request_id = None


def compile_blocker(message: str, transient: bool = False) -> str:
    """The blocker of a failed compile: its error's message (L6), or, when the compile failed
    transiently (timeouts, retryable errors) for its whole retry window,
    `compile_unavailable: <message>`: infrastructure, not the operation's fault."""
    if transient:
        return f"{COMPILE_UNAVAILABLE}: {message}"[:MAX_ERROR_LENGTH]
    return message or "compile_failed"


def block_compile(state: LedgerState, op_id: str, message: str) -> None:
    """A compile error blocks the operation with the error's message (L6); so does a
    transient failure that outlasted its retries, with `compile_blocker`'s message."""
    request_id = state.compiling.pop(op_id, None)
    if request_id is None:
        return
    release_claims(state, request_id)
    record = state.operations[op_id]
    record.request_id = None
    block_operation(record, [message or "compile_failed"], message or "compile_failed")


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
        bump(counters_of(state).requests_blocked, INTERPRETER_UNAVAILABLE)
        block_operation(
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


def launch_refusal(state: LedgerState, config: LedgerConfig, operation_type: str) -> str | None:
    """Why no attempt of `operation_type` may start now, None when one may: the ledger is
    stopped, held (L12), or its concurrency or the type's lane is full (L4)."""
    if state.stopped:
        return "stopped"
    if state.holds:
        return "held"
    total, by_type = in_flight(state)
    if not fits(config, total, by_type, operation_type):
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
        bump(counters_of(state).requests_blocked, INTERPRETER_UNAVAILABLE)
        version = request.body.get("protocol_version")
        for op_id in request.operation_ids:
            if op_id in state.operations:
                block_operation(
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
    asked for: a result for another operation is never frozen."""
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
    waiting = [r for r in state.requests.values() if r.phase == "frozen"]
    waiting.sort(key=lambda r: min(state.operations[o].sequence for o in r.operation_ids))
    return _within_slots(state, config, waiting)


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


def all_done(state: LedgerState) -> bool:
    """Nothing compiling or in flight and every operation resolved or blocked."""
    total, _ = in_flight(state)
    return total == 0 and all(r.phase in ("resolved", "blocked") for r in state.operations.values())
