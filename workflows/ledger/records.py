"""The ledger's records and the helpers every part of its core shares (pure): refusals, blockers,
counters, claims, retention (`compact`), and what counts as an attempt in progress (L4).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from workflows.ledger.models import (
    LedgerConfig,
    LedgerCounters,
    LedgerState,
    OperationIntent,
    OperationPhase,
    OperationRecord,
    RequestRecord,
    RequestReport,
)
from workflows.validation import InvalidRequest as InvalidRequest

MISSING_PARTICIPANTS = "missing_participants"
PARTICIPANT_MISMATCH = "participant_mismatch"
INVALID_COMPILE_RESULT = "invalid_compile_result"
# Errors recorded on an operation are cut to this many characters.
MAX_ERROR_LENGTH = 500
# A request's last submit/query status is kept whole up to this size (see bounded_status).
MAX_STATUS_BYTES = 1024
INTERPRETER_UNAVAILABLE = "request_interpreter_unavailable"
SKIPPED = "skipped"
# Blockers `resume` leaves alone: the intent itself would have to change.
PERMANENT_BLOCKERS = frozenset({MISSING_PARTICIPANTS, INTERPRETER_UNAVAILABLE})


# The ledger's refusals are `InvalidRequest`s, as the schedule's are; `LedgerInputError` is
# their former name, still named on the wire (`FORMER_REFUSAL_TYPES`) for clients that match
# on it (docs/compat.md).
LedgerInputError = InvalidRequest
# The former name of each refusal type (sent in each refusal's details).
FORMER_REFUSAL_TYPES = {"InvalidRequest": "LedgerInputError"}


class LedgerStopped(InvalidRequest):
    """A message a stopped ledger no longer takes (`hold`, `resume`, `stop`); the class name is
    the rejection type clients see."""


class RecoveryConflictError(RuntimeError):
    """Two unresolved requests claim one canvas (L14): sending anything could collide."""


def canvases_of(intent: OperationIntent) -> list[str]:
    """The operation's canvases: participants deduplicated and sorted (L5)."""
    return sorted(set(intent.participants))


def json_size(model: Any) -> int:
    """Bytes of a model (or the state) as JSON, as it is carried and sent."""
    return len(model.model_dump_json())


def is_known(state: LedgerState, op_id: str) -> bool:
    """An operation in the state, or resolved and still remembered: sent again, a duplicate or
    a conflict (see `enqueue`)."""
    return op_id in state.operations or op_id in state.forgotten


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


def fits(config: LedgerConfig, total: int, by_type: Counter[str], operation_type: str) -> bool:
    if total >= config.concurrency:
        return False
    lane = config.lanes.get(operation_type)
    return lane is None or by_type[operation_type] < lane


def is_resolved(state: LedgerState, op_id: str) -> bool:
    """Resolved, in the state or remembered; an unknown ID is not (L3)."""
    known = state.operations.get(op_id)
    if known is None:
        return op_id in state.forgotten
    return known.phase == "resolved"


# ---------------------------------------------------------------- the launch gate (L4, L11, L12)
#
# Every place a request may be sent (a compile's end, a relaunch, a grant, stop's final
# queries) asks `launch_refusal` first, and nothing of an unsupported protocol is ever handed
# to a request loop (`block_unsupported`).

# The `launch` of a request recorded by `freeze` but never started (see `freeze`).
NEVER_LAUNCHED = 0


# A counter keyed by a kind keeps at most MAX_COUNTER_KINDS kinds (a new one past them counts
# as `other`), each cut to MAX_COUNTER_KIND characters: the kinds are the ledger's own words,
# this only guards the carried state.
MAX_COUNTER_KINDS = 16
MAX_COUNTER_KIND = 40


def counters_of(state: LedgerState) -> LedgerCounters:
    """The state's counters. A carried state without them starts them from what
    it knows (every operation ever enqueued took a sequence): `read_start` seeds them as the
    state comes, before anything changes it."""
    if state.counters is None:
        state.counters = LedgerCounters(operations_enqueued=state.next_sequence - 1)
    return state.counters


def bump(counts: dict[str, int], kind: str, amount: int = 1) -> None:
    kind = str(kind)[:MAX_COUNTER_KIND]
    if kind not in counts and len(counts) >= MAX_COUNTER_KINDS:
        kind = "other"
    counts[kind] = counts.get(kind, 0) + amount


def check_running(state: LedgerState) -> None:
    """`hold`, `resume`, `settle` and `stop` are refused by a stopped ledger."""
    if state.stopped:
        raise LedgerStopped("ledger is stopped")


def request_sequence(state: LedgerState, request: RequestRecord) -> int:
    known = [state.operations[o].sequence for o in request.operation_ids if o in state.operations]
    return min(known, default=0)


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


def is_stale(request: RequestRecord, report: RequestReport) -> bool:
    """A report from an earlier loop of a request that was since relaunched (resume)."""
    return report.launch is not None and report.launch != request.launch


def block_operation(record: OperationRecord, blockers: list[str], error: str) -> None:
    record.phase = OperationPhase.BLOCKED
    record.blockers = [blocker[:MAX_ERROR_LENGTH] for blocker in blockers]
    record.error = error[:MAX_ERROR_LENGTH]


def release_claims(state: LedgerState, request_id: str) -> None:
    for canvas in [c for c, holder in state.claims.items() if holder == request_id]:
        del state.claims[canvas]
