"""The `FrozenRequest` child's own step function (pure, L7-L10): what an answer of the far side
means, what the request does next, and when it retries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from workflows.ledger.models import (
    RequestAction,
    RequestPhase,
    RequestReport,
    RequestStatus,
    RetryConfig,
)
from workflows.ledger.records import MAX_ERROR_LENGTH
from workflows.validation import InvalidRequest as InvalidRequest
from workflows.validation import (
    format_validation_error,
)

MAX_BACKOFF_EXPONENT = 6


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


# The blocker of a `complete_activity` that answered `{"blocked": true}` without an error.
COMPLETION_BLOCKED = "completion_blocked"
# The prefix of the blocker of a `complete_activity` that refused (a non-retryable error) or
# answered something that is neither null nor a blocked answer.
COMPLETION_FAILED = "completion_failed"
# The prefix of the blocker of a `complete_activity` that failed transiently (timeouts,
# retryable errors) for its whole retry window: infrastructure, not the completion's answer.
COMPLETION_UNAVAILABLE = "completion_unavailable"
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


def completion_failure(message: str, transient: bool = False) -> str:
    """The blocker of a `complete_activity` that failed: `completion_failed: <message>` when
    it refused (a non-retryable error), `completion_unavailable: <message>` when it failed
    transiently for its whole retry window."""
    prefix = COMPLETION_UNAVAILABLE if transient else COMPLETION_FAILED
    return f"{prefix}: {message}"[:MAX_ERROR_LENGTH]


def completion_blocked(step: Step, reason: str) -> Step:
    """A resolved step whose completion refused it (or failed): the request blocks with
    `reason` (L10) and keeps its claims; `resume` queries again (L13) and completes again.
    The status keeps the far side's outcome, with `blocked` and the reason as its error."""
    status = step.status.model_copy(update={"blocked": True, "error": reason})
    return Step("blocked", status, RequestAction.QUERY)


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
