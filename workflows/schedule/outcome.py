"""Delivering a run's outcome: the outcome activity under `outcome_retries` (S11), made by
the `ScheduledRun` child for a run that delivers its own outcome (`deliver_outcome`) and by
the schedule for the others and for a dead letter (`workflows.schedule.delivery`); and how a
failure reads as a `RunError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    RetryState,
)
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from workflows import metrics
    from workflows.kernel import now_ms
    from workflows.schedule.models import (
        OUTCOME_TIMEOUT_ERROR,
        Outcome,
        RunError,
        ScheduledRunObject,
        ScheduleInput,
    )


@dataclass(frozen=True)
class Interrupted:
    """A delivery cancelled before it delivered (`deliver_until`'s `interrupt`):
    `elapsed_ms` from its start to the cancellation, None when its activity was never sent
    (cancelled in the workflow task that scheduled it)."""

    elapsed_ms: int | None


def _outcome_options(
    settings: ScheduleInput, run: ScheduledRunObject, attempts: int | None
) -> dict[str, Any]:
    """The outcome activity's options: `outcome_retries` mapped to its retry policy (S11),
    with `attempts` (the attempts left) in place of `max_attempts` when given."""
    retries = settings.outcome_retries
    return {
        "task_queue": settings.activity_task_queue,
        "start_to_close_timeout": timedelta(milliseconds=settings.outcome_timeout_ms),
        "retry_policy": RetryPolicy(
            initial_interval=timedelta(milliseconds=retries.initial_interval_ms),
            backoff_coefficient=retries.backoff_coefficient,
            maximum_interval=timedelta(milliseconds=retries.maximum_interval_ms),
            maximum_attempts=retries.max_attempts if attempts is None else attempts,
        ),
        "summary": f"outcome {run.idempotency_key}",
    }


async def deliver_outcome(
    settings: ScheduleInput,
    run: ScheduledRunObject,
    outcome: Outcome,
    emit: Callable[..., None] | None = None,
) -> RunError | None:
    """Call the outcome activity under `outcome_retries` (S11); None when delivered, else the
    error it was dead-lettered with (logged, and emitted as `dead_lettered` when `emit`)."""
    try:
        await workflow.execute_activity(
            settings.outcome_activity,
            args=[run, outcome.wire()],
            **_outcome_options(settings, run, None),
        )
        metrics.count(metrics.OUTCOME_DELIVERIES, result="delivered")
        return None
    except ActivityError as failure:
        return _dead_lettered(settings, run, failure, emit)


async def deliver_until(
    settings: ScheduleInput,
    run: ScheduledRunObject,
    outcome: Outcome,
    emit: Callable[..., None],
    interrupt: Callable[[], bool],
    attempts: int | None = None,
) -> RunError | Interrupted | None:
    """`deliver_outcome` with `attempts` left, cancelled once `interrupt()` is true: it
    returns only once the activity has really stopped (WAIT_CANCELLATION_COMPLETED: an
    attempt that was running finishes first, and may deliver), `Interrupted` when it had not
    delivered by then."""
    sent_after = workflow.info().get_current_history_length()
    started = now_ms()
    handle = workflow.start_activity(
        settings.outcome_activity,
        args=[run, outcome.wire()],
        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        **_outcome_options(settings, run, attempts),
    )
    await workflow.wait_condition(lambda: handle.done() or interrupt())
    # Still in the task that scheduled it: the activity was never sent, no attempt began.
    sent = workflow.info().get_current_history_length() != sent_after
    elapsed = now_ms() - started if sent else None
    if not handle.done():
        handle.cancel()
    try:
        await handle
    except asyncio.CancelledError:
        return Interrupted(elapsed)
    except ActivityError as failure:
        cause = failure.cause
        if isinstance(cause, CancelledError) or failure.retry_state == RetryState.CANCEL_REQUESTED:
            return Interrupted(elapsed)
        return _dead_lettered(settings, run, failure, emit)
    metrics.count(metrics.OUTCOME_DELIVERIES, result="delivered")
    return None


def _dead_lettered(
    settings: ScheduleInput,
    run: ScheduledRunObject,
    failure: ActivityError,
    emit: Callable[..., None] | None,
) -> RunError:
    """The error a delivery gave up with (logged, emitted as `dead_lettered` when `emit`)."""
    retries = settings.outcome_retries
    error = error_of(failure.cause, timeout_name=OUTCOME_TIMEOUT_ERROR)
    attempt = (
        retries.max_attempts if failure.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED else 0
    )
    workflow.logger.error(
        "dead-lettered the outcome of run %s after %s attempt(s): %s",
        run.idempotency_key,
        attempt or "unknown",
        error.message,
    )
    if emit is not None:
        emit("dead_lettered", attempt=attempt, error=error.model_dump())
    return error


def errored(name: str, message: str) -> Outcome:
    """An `errored` outcome with error `{name, message}`."""
    return Outcome(status="errored", error=RunError(name=name, message=message))


def error_of(cause: BaseException | None, *, timeout_name: str) -> RunError:
    """`{name, message}` of an activity failure's cause."""
    if isinstance(cause, TemporalTimeoutError):
        kind = cause.type.name if cause.type is not None else "UNKNOWN"
        return RunError(name=timeout_name, message=f"activity timed out ({kind})")
    if isinstance(cause, ApplicationError):
        return RunError(name=cause.type or "Error", message=cause.message)
    if cause is None:
        return RunError(name="Error", message="unknown failure")
    return RunError(name=type(cause).__name__, message=str(cause))
