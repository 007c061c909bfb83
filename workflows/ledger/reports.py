"""What a launched request reports (pure, L7-L10): its attempts, its end, or the end of its
workflow without a report.
"""

from __future__ import annotations

from workflows.ledger.models import (
    LedgerConfig,
    LedgerState,
    OperationPhase,
    RequestAction,
    RequestPhase,
    RequestRecord,
    RequestReport,
)
from workflows.ledger.records import (
    MAX_ERROR_LENGTH,
    NEVER_LAUNCHED,
    block_operation,
    bounded_status,
    bump,
    compact,
    counters_of,
    is_stale,
    release_claims,
)
from workflows.ledger.request_step import attempt_answer, completion_refusal, normalize_status
from workflows.validation import InvalidRequest as InvalidRequest


def record_attempt(state: LedgerState, report: RequestReport) -> bool:
    """A non-final attempt of an in-flight request: keep attempt/retry_at/next action, and
    whether it now waits for a grant (its slot is free, L4). A report sent again by a request
    that waited long for its grant (see `FrozenRequest`) after the grant left changes nothing."""
    request = state.requests.get(report.request_id)
    if request is None or request.phase != "in_flight" or is_stale(request, report):
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
    if request is None or request.phase in ("resolved", "blocked") or is_stale(request, report):
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
        release_claims(state, request.id)
        state.resolved_total += len(request.operation_ids)
        bump(counters_of(state).operations_resolved, status.outcome, len(request.operation_ids))
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
        block_operation(state.operations[op_id], [reason], reason)
    counters = counters_of(state)
    refusal = completion_refusal(status)
    bump(counters.requests_blocked, "far_side" if refusal is None else "completion")
    if refusal is not None:
        bump(counters.completion_refusals, refusal)
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
        block_operation(state.operations[op_id], [reason], reason)
    bump(counters_of(state).requests_blocked, reason.split(":", 1)[0])
    return True


def _count_attempt(state: LedgerState, request: RequestRecord, report: RequestReport) -> None:
    """Count the attempt a report tells of, once: a report of an attempt already counted (a
    reminder sent again while it waits for its grant) counts nothing."""
    if report.attempt > request.attempt:
        answer = attempt_answer(normalize_status(report.status))
        bump(counters_of(state).request_attempts, answer)
