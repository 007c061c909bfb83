"""`ScheduledRun`: one child workflow per run of a schedule.

It calls the run activity once under the run timeout (S9, S10) and reports to its schedule.
A run started with `deliver_by_schedule` (behind the patch `SCHEDULE_DELIVERS_PATCH`) ends as
soon as its run stops: its result carries the outcome, and the schedule delivers it
(`workflows.schedule.redelivery.Deliveries`), so the child's completion is the settle and
frees the slot at no extra action. A run started by an earlier build delivers its outcome
itself, at least once under `outcome_retries` (S11), and its completion is the whole report.
Two cases report by signal instead:

- the run delivers its own outcome and took its schedule's last free slot
  (`settle_by_signal`): `run_settled` as soon as the run stops, so a queued run need not wait
  for the outcome's delivery;
- the schedule continued as new while the run was going and handed it over
  (`durability.report_by_signal`): `run_settled` as soon as it stops, then it delivers its
  own outcome and signals `run_acknowledged` to the schedule's current run.

The schedule never signals a run that may be completing, except for that rare hand-over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    RetryState,
    TimeoutType,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from workflows import SANDBOXED, metrics
    from workflows.kernel import ShellKernel, now_ms, refusal
    from workflows.schedule import RUN_WORKFLOW_TYPE
    from workflows.schedule.core import Run, ScheduleCore
    from workflows.schedule.lifecycle import Lifecycle
    from workflows.schedule.models import (
        OUTCOME_TIMEOUT_ERROR,
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
        ScheduledRunObject,
        ScheduledRunResult,
        ScheduleInput,
        idempotency_key,
        lifecycle_event,
        plugin_run_activity_id,
        run_workflow_id,
    )
    from workflows.schedule.status import iso
    from workflows.validation import INVALID_START_INPUT, format_validation_error

# Internal signal, schedule -> run (not part of the wire contract): report by signal from now
# on, not by completing.
REPORT_BY_SIGNAL = "durability.report_by_signal"
# The kernel's task groups of child starts (`RunReports.start`) and of the watches on the
# started runs' completions, by scheduled_time.
STARTS = "run-start"
WATCHES = "run-watch"
# Time a cancelled run activity gets, beyond run_timeout_ms, to acknowledge cancellation.
RUN_CANCEL_GRACE = timedelta(seconds=30)
# Recorded by a schedule when it starts a run whose outcome it delivers itself
# (docs/upgrading.md).
SCHEDULE_DELIVERS_PATCH = "schedule-delivers-outcomes"
# Recorded by a run, in its first task, that takes either path new in 0.1.1: it ends as its
# run stops (`deliver_by_schedule`), and a plugin-hosted run (`run_host` "plugin") has no run
# timer, a default heartbeat timeout and its timeout in the activity ID (`run_call`). One
# patch for both: each patch costs every run two history events (its marker and the
# `TemporalChangeVersion` upsert the SDK adds).
RUN_PATHS_PATCH = "scheduled-run-0.1.1-paths"


@workflow.defn(name=RUN_WORKFLOW_TYPE, sandboxed=SANDBOXED)
class ScheduledRunWorkflow:
    """One run: call the run activity once, deliver the outcome, report to the schedule."""

    def __init__(self) -> None:
        self._report_by_signal = False
        self._new_paths = False

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
        # Asked once, before the first command; a run recorded before it takes the old paths.
        self._new_paths = (
            run_input.deliver_by_schedule or run_input.settings.hosted_by() is RunHost.PLUGIN
        ) and workflow.patched(RUN_PATHS_PATCH)
        self._lifecycle = Lifecycle(run_input.settings)
        self._emit("started")
        started = now_ms()
        metrics.record(metrics.RUN_START_LATENESS, started - run_input.run.due_at)
        outcome = await self._execute()
        settled: dict[str, Any] = {"outcome": outcome.status}
        if outcome.error is not None:
            settled["error"] = outcome.error.model_dump()
        if outcome.error is None or outcome.error.name != RUN_INTERRUPTED_ERROR:
            settled["duration_ms"] = now_ms() - started
        self._emit("settled", **settled)
        if run_input.deliver_by_schedule and self._new_paths:
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
            settled_signal = RunSettled(scheduled_time=scheduled_time, outcome=outcome)
            await self._signal_schedule(RUN_SETTLED_SIGNAL, settled_signal)
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
        call = run_call(settings, hosted=self._hosted())
        handle = workflow.start_activity(
            settings.run_activity,
            self._input.run,
            task_queue=settings.activity_task_queue,
            activity_id=call.activity_id,
            start_to_close_timeout=call.start_to_close,
            heartbeat_timeout=call.heartbeat,
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=f"run {self._input.run.idempotency_key}",
        )
        timed_out = cancelled = False
        try:
            # A plugin-hosted run has no timer: its worker enforces the deadline.
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
        if timed_out:
            return errored(
                RUN_TIMEOUT_ERROR, f"run exceeded run_timeout_ms={settings.run_timeout_ms}"
            )
        if cancelled:
            return errored(RUN_INTERRUPTED_ERROR, "the run was cancelled before it finished")
        if failure is None:
            return Outcome(status="complete")
        return _errored_from(failure, hosted=call.timer is None)

    def _hosted(self) -> bool:
        """Whether the plugin hosts this run (the new commands, behind their patch: a run
        recorded before keeps its timer)."""
        return self._new_paths and self._input.settings.hosted_by() is RunHost.PLUGIN

    async def _signal_schedule(self, signal: str, payload: RunSettled | RunAcknowledged) -> None:
        handle = workflow.get_external_workflow_handle(self._input.schedule_workflow_id)
        try:
            await handle.signal(signal, payload)
        except (FailureError, ApplicationError) as error:
            # The schedule is gone (terminated); the run still delivers its outcome.
            workflow.logger.warning("could not signal %s to the schedule: %s", signal, error)


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
    error = _error_of(failure.cause, timeout_name=OUTCOME_TIMEOUT_ERROR)
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


@dataclass(frozen=True)
class RunCall:
    """How the child calls the run activity: its ID (None: the SDK's), timeouts, and the run
    timer (None: none)."""

    activity_id: str | None
    start_to_close: timedelta
    heartbeat: timedelta | None
    timer: timedelta | None


def run_call(settings: ScheduleInput, *, hosted: bool) -> RunCall:
    """A plugin-hosted run (`hosted`) carries its timeout in its activity ID for the worker
    that enforces it, heartbeats by default, may run a day past its deadline while it winds
    down, and gets no timer; any other run keeps its timer and a 30 s grace (S9, S10)."""
    timeout = timedelta(milliseconds=settings.run_timeout_ms)
    heartbeat_ms = settings.run_heartbeat_timeout_ms
    if hosted:
        return RunCall(
            activity_id=plugin_run_activity_id(settings.run_timeout_ms),
            start_to_close=timeout + timedelta(milliseconds=PLUGIN_RUN_STOP_ALLOWANCE_MS),
            heartbeat=timedelta(milliseconds=heartbeat_ms or PLUGIN_RUN_HEARTBEAT_TIMEOUT_MS),
            timer=None,
        )
    return RunCall(
        activity_id=None,
        start_to_close=timeout + RUN_CANCEL_GRACE,
        heartbeat=None if heartbeat_ms is None else timedelta(milliseconds=heartbeat_ms),
        timer=timeout,
    )


def _errored_from(failure: BaseException, *, hosted: bool = False) -> Outcome:
    cause = failure.cause if isinstance(failure, ActivityError) else failure
    error = _error_of(cause, timeout_name=RUN_INTERRUPTED_ERROR)
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


def _error_of(cause: BaseException | None, *, timeout_name: str) -> RunError:
    """`{name, message}` of an activity failure's cause."""
    if isinstance(cause, TemporalTimeoutError):
        kind = cause.type.name if cause.type is not None else "UNKNOWN"
        return RunError(name=timeout_name, message=f"activity timed out ({kind})")
    if isinstance(cause, ApplicationError):
        return RunError(name=cause.type or "Error", message=cause.message)
    if cause is None:
        return RunError(name="Error", message="unknown failure")
    return RunError(name=type(cause).__name__, message=str(cause))


async def start_run(
    run_input: ScheduledRunInput,
) -> workflow.ChildWorkflowHandle[Any, ScheduledRunResult] | None:
    """Start the run's `ScheduledRun` child, at most once (S6: the ID is the run's, never
    reused); None when a workflow already took that ID (e.g. after a reset): it reports."""
    run = run_input.run
    try:
        return await workflow.start_child_workflow(
            ScheduledRunWorkflow.run,
            run_input,
            id=run_workflow_id(run.object_id, run.scheduled_time),
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            static_summary=f"run {iso(run.scheduled_time)} of {run.object_id}",
        )
    except WorkflowAlreadyStartedError:
        workflow.logger.warning(
            "run %s of %s already started; not starting it again",
            run.scheduled_time,
            run.object_id,
        )
        return None


async def report_of(
    handle: workflow.ChildWorkflowHandle[Any, ScheduledRunResult], run: ScheduledRunObject
) -> ScheduledRunResult:
    """The run's completion is its report: its end and its outcome's delivery. A run
    terminated or failed from outside never reports: it ends interrupted, undelivered."""
    try:
        return await handle
    except ChildWorkflowError as error:
        workflow.logger.error(
            "run %s of %s ended without reporting: %s", run.scheduled_time, run.object_id, error
        )
        outcome = errored(RUN_INTERRUPTED_ERROR, f"the run workflow ended: {error}")
        return ScheduledRunResult(outcome=outcome, delivered=False)


async def hand_over(children: Sequence[tuple[str, asyncio.Task[Any] | None]]) -> None:
    """Before continue-as-new (which loses the handles the schedule awaits its runs' ends
    with): tell each run still open (workflow ID, the task awaiting its completion) to report
    by signal from now on, to the schedule's workflow ID, which reaches whichever run of the
    schedule is current. A run that already closed cannot take the signal, but its completion
    is on its way to this run of the schedule: wait for its task."""

    async def one(workflow_id: str, watch: asyncio.Task[Any] | None) -> None:
        try:
            await workflow.get_external_workflow_handle(workflow_id).signal(REPORT_BY_SIGNAL)
        except FailureError as error:
            if is_cancelled_exception(error):
                raise
            if watch is not None:
                await workflow.wait_condition(watch.done)

    await asyncio.gather(*(one(workflow_id, watch) for workflow_id, watch in children))


class RunReports:
    """The schedule's side of the protocol above: it starts each run's child, reads the run's
    report from the child's completion (or, once handed over, from its signals), and applies
    it to the core. `send_progress` is the shell's progress barrier."""

    def __init__(
        self,
        settings: ScheduleInput,
        core: ScheduleCore,
        kernel: ShellKernel,
        send_progress: Callable[..., None],
        stopped: Callable[[int, Outcome], None],
    ) -> None:
        self._settings = settings
        # A run ended as it stopped, its outcome for the schedule to deliver.
        self._stopped = stopped
        self._object_id = settings.object_id or ""
        self._core = core
        self._kernel = kernel
        self._send_progress = send_progress
        # Runs told to report by signal (`hand_over`): each is told once.
        self._handed_over: set[int] = set()

    def use_settings(self, settings: ScheduleInput) -> None:
        """Runs started from now on get `settings` in their input (`configure`); runs
        started before keep theirs."""
        self._settings = settings

    def start(self, run: Run, settle_by_signal: bool) -> None:
        """Start the run's child (a task of the kernel's group `STARTS`)."""
        self._kernel.spawn(STARTS, self._start(run, settle_by_signal, self._settings))

    async def _start(self, run: Run, settle_by_signal: bool, settings: ScheduleInput) -> None:
        run_object = ScheduledRunObject.of(
            self._object_id, run.scheduled_time, run.due_at, run.params
        )
        handle = await start_run(
            ScheduledRunInput(
                run=run_object,
                schedule_workflow_id=workflow.info().workflow_id,
                settings=settings,
                settle_by_signal=settle_by_signal,
                deliver_by_schedule=workflow.patched(SCHEDULE_DELIVERS_PATCH),
            )
        )
        if handle is None:  # at most once (S6): this run already exists, and it reports
            self._core.forget(run.scheduled_time)
            self._kernel.wake()
            self._send_progress(refused=run.scheduled_time)
            return
        # The watch on the run's completion (its report), keyed by its scheduled_time.
        self._kernel.spawn(WATCHES, self._watch(run_object, handle), key=run.scheduled_time)

    async def _watch(
        self,
        run: ScheduledRunObject,
        handle: workflow.ChildWorkflowHandle[Any, ScheduledRunResult],
    ) -> None:
        """Wait for the run's report (`report_of`) and apply it."""
        result = await report_of(handle, run)
        if result.outcome_pending:
            # The run stopped; the schedule delivers its outcome (that sends a command).
            self._stopped(run.scheduled_time, result.outcome)
            return
        self.ended(
            run.scheduled_time,
            result.outcome,
            result.dead_letter_error,
            result.delivered is not False,
        )
        # A run's end frees a slot and forgets the run: decision state (the progress barrier).
        self._send_progress(acknowledged=run.scheduled_time)

    def settled(self, settled: RunSettled) -> None:
        """The `run_settled` signal: the run stopped; its slot is free."""
        if self._core.settled_by_signal(settled.scheduled_time, settled.outcome, now_ms()):
            self._kernel.wake()

    def ended(
        self,
        scheduled_time: int,
        outcome: Outcome | None,
        dead_letter_error: RunError | None = None,
        delivered: bool = True,
    ) -> None:
        """The run's end and its outcome's delivery (its completion, or `run_acknowledged`)."""
        key = idempotency_key(self._object_id, scheduled_time)
        if self._core.run_ended(
            scheduled_time, key, outcome, dead_letter_error, delivered=delivered, now_ms=now_ms()
        ):
            self._kernel.wake()  # a queued run can take the freed slot, or it paused

    async def hand_over_alive(self) -> bool:
        """Before continue-as-new: the runs still going report by signal from now on."""
        watches = self._kernel.members(WATCHES)
        alive = {t: w for t, w in watches.items() if t not in self._handed_over}
        if alive:
            self._handed_over.update(alive)
            await hand_over([(run_workflow_id(self._object_id, t), w) for t, w in alive.items()])
            await workflow.wait_condition(workflow.all_handlers_finished)
        return True
