"""`ScheduledRun`: one child workflow per run of a schedule (the schedule's side of the
protocol is `workflows.schedule.reports`).

It calls the run activity once under the run timeout (S9, S10) and reports to its schedule.
A run started with `deliver_by_schedule` ends as soon as its run finishes: its result carries
the outcome and the schedule delivers it (`workflows.schedule.delivery`), so the child's
completion frees the slot at no extra action. A run started without it delivers its outcome
itself, at least once under `outcome_retries` (S11), and its completion is the whole report.
Two cases report by signal instead:

- the run delivers its own outcome and took its schedule's last free slot
  (`settle_by_signal`): `run_settled` as soon as the run finishes, so a queued run need not
  wait for the outcome's delivery;
- the schedule continued as new while the run was going and handed it over
  (`durability.report_by_signal`): `run_settled` as soon as it finishes, then it delivers its
  own outcome and signals `run_acknowledged` to the schedule's current run.

The schedule never signals a run that may be completing, except for that rare hand-over.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    FailureError,
    TimeoutType,
)
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from workflows import SANDBOXED, metrics
    from workflows.kernel import now_ms, refusal
    from workflows.schedule import RUN_WORKFLOW_TYPE
    from workflows.schedule.lifecycle import Lifecycle
    from workflows.schedule.models import (
        PLUGIN_RUN_HEARTBEAT_TIMEOUT_MS,
        PLUGIN_RUN_STOP_ALLOWANCE_MS,
        RUN_ACKNOWLEDGED_SIGNAL,
        RUN_INTERRUPTED_ERROR,
        RUN_SETTLED_SIGNAL,
        RUN_TIMEOUT_ERROR,
        Outcome,
        RunAcknowledged,
        RunError,
        RunHost,
        RunSettled,
        ScheduledRunInput,
        ScheduledRunResult,
        ScheduleInput,
        lifecycle_event,
        plugin_run_activity_id,
    )
    from workflows.schedule.outcome import deliver_outcome, error_of, errored
    from workflows.schedule.patches import RUN_PATHS_PATCH
    from workflows.validation import INVALID_START_INPUT, format_validation_error

# Internal signal, schedule -> run (not part of the wire contract): report by signal from now
# on, not by completing.
REPORT_BY_SIGNAL = "durability.report_by_signal"
# Time a cancelled run activity gets, beyond run_timeout_ms, to acknowledge cancellation.
RUN_CANCEL_GRACE = timedelta(seconds=30)


@workflow.defn(name=RUN_WORKFLOW_TYPE, sandboxed=SANDBOXED)
class ScheduledRunWorkflow:
    """One run: call the run activity once, deliver the outcome, report to the schedule."""

    def __init__(self) -> None:
        self._report_by_signal = False
        self._paths = RunPaths(current=False, server_timeout=False)

    @workflow.signal(name=REPORT_BY_SIGNAL)
    def report_by_signal(self) -> None:
        """The schedule continued as new: report by signal, not by completing."""
        self._report_by_signal = True

    @workflow.run
    async def run(self, input: Any) -> ScheduledRunResult:
        """Run (S9, S10), deliver the outcome at least once (S11), report."""
        # Validated here, not by the converter: started by hand with a bad input, the run
        # fails once, naming the field, instead of failing every workflow task.
        try:
            self._input = run_input = ScheduledRunInput.model_validate(input)
        except ValidationError as error:
            message = format_validation_error("ScheduledRun input", error)
            former = {INVALID_START_INPUT: "InvalidScheduledRunInput"}
            raise refusal(message, INVALID_START_INPUT, former) from None
        scheduled_time = run_input.run.scheduled_time
        self._paths = run_paths(run_input)
        self._lifecycle = Lifecycle(run_input.settings)
        self._emit("started")
        started = now_ms()
        metrics.record(metrics.RUN_START_LATENESS, started - run_input.run.due_at)
        outcome = await self._execute()
        finished: dict[str, Any] = {"outcome": outcome.status}
        if outcome.error is not None:
            finished["error"] = outcome.error.model_dump()
        if outcome.error is None or outcome.error.name != RUN_INTERRUPTED_ERROR:
            finished["duration_ms"] = now_ms() - started
        self._emit("settled", **finished)  # the lifecycle event's wire name
        if run_input.deliver_by_schedule and self._paths.current:
            await self._lifecycle.drain()
            # No await between this check and returning (as below): a hand-over that lands
            # while this task completes is seen by the retried task, which then reports by
            # signal and delivers the outcome itself.
            if not self._report_by_signal:
                return ScheduledRunResult(outcome=outcome, delivered=None, outcome_pending=True)
        delivery = asyncio.create_task(
            deliver_outcome(run_input.settings, run_input.run, outcome, self._emit)
        )
        if not run_input.settle_by_signal:
            await workflow.wait_condition(lambda: delivery.done() or self._report_by_signal)
        if not delivery.done():
            finished_signal = RunSettled(scheduled_time=scheduled_time, outcome=outcome)
            await self._signal_schedule(RUN_SETTLED_SIGNAL, finished_signal)
        dead_letter = await delivery
        await self._lifecycle.drain()
        # No await between this check and returning: a hand-over signal that lands while this
        # task completes makes Temporal reject the completion, and the retried task sees it.
        if self._report_by_signal:
            acknowledged = RunAcknowledged(scheduled_time=scheduled_time)
            if dead_letter is not None:
                # With the outcome, so the schedule keeps it for `dead_letters`/`redeliver`.
                acknowledged = RunAcknowledged(
                    scheduled_time=scheduled_time,
                    dead_lettered=True,
                    outcome=outcome,
                    dead_letter_error=dead_letter,
                )
            await self._signal_schedule(RUN_ACKNOWLEDGED_SIGNAL, acknowledged)
        return ScheduledRunResult(
            outcome=outcome, delivered=dead_letter is None, dead_letter_error=dead_letter
        )

    def _emit(self, event_type: str, **fields: Any) -> None:
        run = self._input.run
        self._lifecycle.emit(
            lifecycle_event(event_type, run.idempotency_key, run.scheduled_time, now_ms(), **fields)
        )

    async def _execute(self) -> Outcome:
        settings = self._input.settings
        hosted = self._hosted()
        call = run_call(settings, hosted=hosted, server_timeout=self._paths.server_timeout)
        handle = workflow.start_activity(
            settings.run_activity,
            self._input.run,
            task_queue=settings.activity_task_queue,
            activity_id=call.activity_id,
            schedule_to_close_timeout=call.schedule_to_close,
            start_to_close_timeout=call.start_to_close,
            heartbeat_timeout=call.heartbeat,
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=f"run {self._input.run.idempotency_key}",
        )
        timed_out = cancelled = False
        try:
            # A plugin-hosted run has no timer: its worker enforces the deadline; nor has an
            # external one of these paths: the server does (its schedule-to-close timeout).
            await workflow.wait_condition(
                handle.done, timeout=call.timer, timeout_summary="run timeout"
            )
        except TimeoutError:
            # When the run timer and the activity's own end (e.g. a heartbeat timeout after
            # its worker died) land in one workflow task, the activity's end is the truth:
            # a killed run is interrupted (S10), not timed out. No command changes here.
            timed_out = not handle.done()
        except asyncio.CancelledError:
            cancelled = True
        if not handle.done():
            handle.cancel()
        failure: BaseException | None = None
        try:
            # With WAIT_CANCELLATION_COMPLETED this returns once the activity really stopped.
            await handle
        except (ActivityError, asyncio.CancelledError) as error:
            failure = error
        timeout = errored(
            RUN_TIMEOUT_ERROR, f"run exceeded run_timeout_ms={settings.run_timeout_ms}"
        )
        if timed_out:
            return timeout
        if cancelled:
            return errored(RUN_INTERRUPTED_ERROR, "the run was cancelled before it finished")
        if failure is None:
            return Outcome(status="complete")
        # Schedule-to-close; start-to-close too, which the server sets to the same length.
        server_timed_out = _timed_out(failure)
        if call.schedule_to_close is not None and server_timed_out:
            await _stop_allowance()
            return timeout
        return _errored_from(failure, hosted=hosted)

    def _hosted(self) -> bool:
        """Whether the plugin hosts this run (behind `RUN_PATHS_PATCH`: a history without the
        marker keeps its run timer)."""
        return self._paths.current and self._input.settings.hosted_by() is RunHost.PLUGIN

    async def _signal_schedule(self, signal: str, payload: RunSettled | RunAcknowledged) -> None:
        handle = workflow.get_external_workflow_handle(self._input.schedule_workflow_id)
        try:
            await handle.signal(signal, payload)
        except (FailureError, ApplicationError) as error:
            # The schedule is gone (terminated); the run still delivers its outcome.
            workflow.logger.warning("could not signal %s to the schedule: %s", signal, error)


@dataclass(frozen=True)
class RunPaths:
    """The paths a run takes, decided in its first task before any command: `current`, those
    of `RUN_PATHS_PATCH` (it ends as its run stops when the schedule delivers; a plugin-hosted
    run has no timer); `server_timeout`, an external run's timeout kept by the server (the
    activity's schedule-to-close timeout) instead of a run timer."""

    current: bool
    server_timeout: bool


def run_paths(run_input: ScheduledRunInput) -> RunPaths:
    """The run's paths. A run whose schedule sets `run_paths` takes the current ones and
    records no patch marker (each costs a run two events). An older worker that ran such a
    run ignored the field and asked `RUN_PATHS_PATCH`, and kept its run timer: replaying,
    the run asks the patch to tell the two apart (asked in replay, `patched` sends no command
    when the history holds no marker). A run started without the field asks the patch as it
    always did."""
    if not (run_input.deliver_by_schedule or run_input.settings.hosted_by() is RunHost.PLUGIN):
        return RunPaths(current=False, server_timeout=False)
    if not run_input.run_paths:
        return RunPaths(current=workflow.patched(RUN_PATHS_PATCH), server_timeout=False)
    older_worker = workflow.unsafe.is_replaying() and workflow.patched(RUN_PATHS_PATCH)
    return RunPaths(current=True, server_timeout=not older_worker)


@dataclass(frozen=True)
class RunCall:
    """How the child calls the run activity: its ID (None: the SDK's), timeouts, and the run
    timer (None: none)."""

    activity_id: str | None
    start_to_close: timedelta | None
    heartbeat: timedelta | None
    timer: timedelta | None
    schedule_to_close: timedelta | None = None


def run_call(settings: ScheduleInput, *, hosted: bool, server_timeout: bool = False) -> RunCall:
    """A plugin-hosted run (`hosted`) carries its timeout in its activity ID for the worker
    that enforces it, heartbeats by default, may run a day past its deadline while it winds
    down, and gets no timer. Any other run is timed out at `run_timeout_ms` from its
    scheduling (S9, S10): with `server_timeout` by the server (schedule-to-close), else by its
    run timer, which cancels it with a 30 s grace."""
    timeout = timedelta(milliseconds=settings.run_timeout_ms)
    heartbeat_ms = settings.run_heartbeat_timeout_ms
    heartbeat = None if heartbeat_ms is None else timedelta(milliseconds=heartbeat_ms)
    if hosted:
        return RunCall(
            activity_id=plugin_run_activity_id(settings.run_timeout_ms),
            start_to_close=timeout + timedelta(milliseconds=PLUGIN_RUN_STOP_ALLOWANCE_MS),
            heartbeat=timedelta(milliseconds=heartbeat_ms or PLUGIN_RUN_HEARTBEAT_TIMEOUT_MS),
            timer=None,
        )
    if server_timeout:
        return RunCall(
            activity_id=None,
            start_to_close=None,
            heartbeat=heartbeat,
            timer=None,
            schedule_to_close=timeout,
        )
    return RunCall(
        activity_id=None,
        start_to_close=timeout + RUN_CANCEL_GRACE,
        heartbeat=heartbeat,
        timer=timeout,
    )


async def _stop_allowance() -> None:
    """After the server timed an external run out: hold its slot for the time its run timer's
    cancellation gave it to stop (S9). The server ends the activity at once; its handler
    learns it only at its next heartbeat, and nothing tells the workflow when it stopped."""
    # Cancelled meanwhile: the run timed out all the same.
    with contextlib.suppress(asyncio.CancelledError):
        await workflow.sleep(RUN_CANCEL_GRACE, summary="run stop allowance")


def _timed_out(failure: BaseException) -> bool:
    """Whether the server timed the activity out at its deadline (not its heartbeat)."""
    cause = failure.cause if isinstance(failure, ActivityError) else failure
    return isinstance(cause, TemporalTimeoutError) and cause.type in (
        TimeoutType.SCHEDULE_TO_CLOSE,
        TimeoutType.START_TO_CLOSE,
    )


def _errored_from(failure: BaseException, *, hosted: bool = False) -> Outcome:
    cause = failure.cause if isinstance(failure, ActivityError) else failure
    error = error_of(cause, timeout_name=RUN_INTERRUPTED_ERROR)
    if (
        hosted
        and isinstance(cause, TemporalTimeoutError)
        and cause.type == TimeoutType.START_TO_CLOSE
    ):
        # Still going a day past its deadline: the server gave up on it (S9).
        error = RunError(name=RUN_TIMEOUT_ERROR, message=error.message)
    if isinstance(cause, CancelledError | asyncio.CancelledError):
        error = RunError(name=RUN_INTERRUPTED_ERROR, message="the run activity was cancelled")
    return Outcome(status="errored", error=error)
