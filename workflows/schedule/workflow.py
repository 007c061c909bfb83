"""The schedule's Temporal shell: `DurabilitySchedule` (one per object) and `ScheduledRun`
(one child per run). The decisions live in `core.py`; this module turns them into timers,
child workflows, activity calls and signals.

Bring your own `next_occurrence` by subclassing (the run method must be redeclared)::

    @workflow.defn(name="DurabilitySchedule")
    class MySchedule(DurabilityScheduleWorkflow):
        def next_occurrence(self, expression: str, after_ms: int) -> int | None:
            return my_calendar.next(expression, after_ms)

        @workflow.run
        async def run(self, input: RawValue = NO_INPUT) -> None:  # see workflows.start_input
            await super().run(input)

and register it instead of `DurabilityScheduleWorkflow`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    RetryState,
    WorkflowAlreadyStartedError,
)
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError
    from temporalio.contrib.opentelemetry import TracingWorkflowInboundInterceptor
    from temporalio.contrib.opentelemetry.workflow import completed_span

    from workflows import SANDBOXED, search_attributes
    from workflows.barrier import record_progress
    from workflows.handover import REPORT_BY_SIGNAL, hand_over
    from workflows.limits import id_problem
    from workflows.schedule import cron
    from workflows.schedule.core import (
        DeadLetter,
        InvalidRequest,
        Run,
        ScheduleCore,
        ScheduleState,
        Skipped,
        parse_backfill,
        parse_cancel,
        parse_redeliver,
        parse_set,
    )
    from workflows.schedule.models import (
        DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS,
        OUTCOME_TIMEOUT_ERROR,
        RUN_INTERRUPTED_ERROR,
        RUN_TIMEOUT_ERROR,
        Outcome,
        RunAcknowledged,
        RunError,
        RunSettled,
        RunStatus,
        ScheduledRunInput,
        ScheduledRunObject,
        ScheduledRunResult,
        ScheduleInput,
        idempotency_key,
        lifecycle_event,
        lifecycle_span_attributes,
        run_workflow_id,
    )
    from workflows.start_input import NO_INPUT, decode_start_input

# Internal signals between a schedule and its runs (not part of the wire contract).
RUN_SETTLED_SIGNAL = "durability.run_settled"
RUN_ACKNOWLEDGED_SIGNAL = "durability.run_acknowledged"
# Schedules that recorded this patch (histories from before it carry no marker):
# - start runs with `acknowledge_by_completion`: a run's completion is its acknowledgement
#   and its outcome delivery overlaps the `run_settled` signal; the schedule hands its runs
#   over to signal reporting before it continues as new;
# - refresh `DurabilityNextTickAt` only when the next tick moves earlier or more than
#   NEXT_TICK_PUBLISH_SLACK_MS later than the published value, not on every tick (each upsert
#   is a billed action and a visibility write).
SCHEDULE_PATCH = "schedule-ack-by-completion"
# The run's side: it acknowledges by completion when its input says so AND this patch holds.
# Without the patch, a run an old worker executed (ignoring the new input field, so it
# signalled its acknowledgement) would fail to replay on a new worker in a rolling upgrade
# without worker versioning.
RUN_PATCH = "run-ack-by-completion"
NEXT_TICK_PUBLISH_SLACK_MS = 60_000
# Before continuing as new, stop starting runs and wait until every started run has ended:
# Temporal refuses a continue-as-new that races a new event (a child's completion, a
# signal), failing that workflow task (UnhandledCommand). Runs still alive once the drain
# has added as many events as the continue-as-new threshold, and at most this many (a run
# that never ends must not grow the history without bound), are handed over to signal
# reporting (`workflows.handover`).
CONTINUE_AS_NEW_DRAIN_EVENTS = 1000
DRAIN_PATCH = "schedule-drain-before-continue-as-new"
# Time a cancelled run activity gets, beyond run_timeout_ms, to acknowledge cancellation.
RUN_CANCEL_GRACE = timedelta(seconds=30)
LIFECYCLE_TIMEOUT = timedelta(seconds=10)
LIFECYCLE_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))


class ScheduleWorkflowInput(ScheduleInput):
    """The start input plus, after continue-as-new, the carried state."""

    carried: ScheduleState | None = None


def _now_ms() -> int:
    return int(workflow.now().timestamp() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _reject(error: ValueError) -> ApplicationError:
    """An update's rejection: not retryable (the same payload is refused again), typed by
    the kind of refusal (`InvalidRequest`, `NoRoomForRuns`, `NoLiveSchedule`)."""
    return ApplicationError(str(error), type=type(error).__name__, non_retryable=True)


def _record_span(event: dict[str, Any]) -> None:
    """Record a lifecycle event as an OpenTelemetry span (never on replay)."""
    if workflow.unsafe.is_replaying() or TracingWorkflowInboundInterceptor._from_context() is None:
        return
    attributes = lifecycle_span_attributes(event)
    completed_span(f"durability.scheduled_run.{event['type']}", attributes=attributes)


class _Lifecycle:
    """Emits lifecycle events (S12): an OTel span, and a best-effort lifecycle activity call."""

    def __init__(self, settings: ScheduleInput) -> None:
        self._settings = settings
        self.tasks: set[asyncio.Task[None]] = set()

    def emit(self, event: dict[str, Any]) -> None:
        _record_span(event)
        workflow.logger.debug("lifecycle event %s", event)
        if self._settings.lifecycle_activity is None:
            return
        task = asyncio.create_task(self._call(self._settings.lifecycle_activity, event))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _call(self, activity_name: str, event: dict[str, Any]) -> None:
        try:
            await workflow.execute_activity(
                activity_name,
                event,
                task_queue=self._settings.activity_task_queue,
                start_to_close_timeout=LIFECYCLE_TIMEOUT,
                retry_policy=LIFECYCLE_RETRY,
                summary=f"lifecycle {event['type']}",
            )
        except ActivityError as error:
            workflow.logger.warning("lifecycle activity failed for %s: %s", event, error.cause)

    async def drain(self) -> None:
        await workflow.wait_condition(lambda: not self.tasks)


@workflow.defn(name="DurabilitySchedule", sandboxed=SANDBOXED)
class DurabilityScheduleWorkflow:
    """One object's recurring schedule (S1-S8, S13): never completes on its own."""

    @workflow.init
    def __init__(self, input: RawValue = NO_INPUT) -> None:
        # Decoded and validated here, not by the converter: a start input the converter
        # cannot read would fail every workflow task; this way the schedule fails once.
        self._input_error: str | None = None
        try:
            start = ScheduleWorkflowInput.model_validate(decode_start_input(input) or {})
        except (ValidationError, ValueError) as error:
            self._input_error = f"invalid DurabilitySchedule input: {error}"
            start = ScheduleWorkflowInput()
        workflow_id = workflow.info().workflow_id
        object_id = start.object_id or workflow_id.removeprefix("schedule:")
        problem = id_problem("object_id", object_id)
        if problem is not None:
            self._input_error = self._input_error or f"invalid DurabilitySchedule input: {problem}"
            object_id = object_id[:100]
        self._settings = ScheduleInput.model_validate(
            {**start.model_dump(exclude={"carried"}), "object_id": object_id}
        )
        self._object_id = object_id
        self._core = ScheduleCore(
            start.carried or ScheduleState(),
            self.next_occurrence,
            self._settings.max_concurrent_runs,
            self._settings.max_queued_runs,
            self._settings.overlap,
            self._settings.max_dead_letters,
        )
        self._lifecycle = _Lifecycle(self._settings)
        self._starts: set[asyncio.Task[None]] = set()
        self._redeliveries: set[asyncio.Task[None]] = set()
        # While draining before continue-as-new: the history length at which to stop waiting.
        self._drain_ends_at: int | None = None
        # Runs started by this run of the workflow, awaited to their completion (the ack).
        self._watches: dict[int, asyncio.Task[None]] = {}
        self._dirty = False
        self._published: dict[str, object] = {}

    def next_occurrence(self, expression: str, after_ms: int) -> int | None:
        """The first tick of `expression` strictly after `after_ms`; override to plug in."""
        return cron.next_occurrence(expression, after_ms)

    @workflow.run
    async def run(self, input: RawValue = NO_INPUT) -> None:
        """Tick, start runs, sleep until the next tick or a message; continue-as-new."""
        if self._input_error is not None:
            raise ApplicationError(
                self._input_error, type="InvalidScheduleInput", non_retryable=True
            )
        timer_fired = False
        while True:
            self._dirty = False
            now = _now_ms()
            started = self._step(now, start_runs=self._drain_ends_at is None)
            if self._drain_ends_at is None and self._should_continue_as_new():
                if not workflow.patched(DRAIN_PATCH):
                    break
                self._drain_ends_at = workflow.info().get_current_history_length() + min(
                    self._continue_as_new_after_events(), CONTINUE_AS_NEW_DRAIN_EVENTS
                )
            if self._drain_ends_at is not None and self._drain_over():
                break
            wake_at = self._core.next_wake_at()
            if timer_fired and not started and wake_at is None:
                # The tick's timer fired and this task starts nothing and sets no new timer,
                # yet the tick may have queued a run: see workflows.barrier.
                self._record_progress()
            timeout = None if wake_at is None else timedelta(milliseconds=wake_at - _now_ms())
            timer_fired = False
            try:
                await workflow.wait_condition(
                    self._woken if self._drain_ends_at is None else self._woken_while_draining,
                    timeout=timeout,
                    timeout_summary="next tick"
                    if wake_at is None
                    else f"next tick {_iso(wake_at)}",
                )
            except TimeoutError:
                timer_fired = True
        await workflow.wait_condition(
            lambda: (
                not self._starts and not self._lifecycle.tasks and workflow.all_handlers_finished()
            )
        )
        if self._watches and workflow.patched(SCHEDULE_PATCH):
            await self._hand_over_runs()
            await workflow.wait_condition(workflow.all_handlers_finished)
        carried = ScheduleWorkflowInput.model_validate(
            {**self._settings.model_dump(), "carried": self._core.state}
        )
        workflow.continue_as_new(carried.model_dump(mode="json"))

    def _step(self, now: int, start_runs: bool = True) -> bool:
        """Tick if due and start what the free slots allow; returns whether a run started."""
        due = self._core.tick(now)
        startable = self._core.take_startable() if start_runs else []
        if isinstance(due, Skipped):
            workflow.logger.warning(
                "skipped the tick %s of %s: %s", due.scheduled_time, self._object_id, due.reason
            )
            self._emit_event(due.scheduled_time, "skipped", now, reason=due.reason)
        elif due is not None:
            self._emit(due, "due", now, queued=due not in startable)
        # A run that leaves slots free reports once, by completing (no signal action).
        for run, last_slot in zip(startable, self._core.takes_last_slot(startable), strict=True):
            task = asyncio.create_task(self._start_run(run, settle_by_signal=last_slot))
            self._starts.add(task)
            task.add_done_callback(self._starts.discard)
        self._publish()
        return bool(startable)

    def _woken(self) -> bool:
        return self._dirty or self._should_continue_as_new()

    def _woken_while_draining(self) -> bool:
        return self._dirty or self._drain_over()

    def _drain_over(self) -> bool:
        """Every started run has ended, or the drain's allowance of events is spent."""
        assert self._drain_ends_at is not None
        return (
            self._drained() or workflow.info().get_current_history_length() >= self._drain_ends_at
        )

    def _drained(self) -> bool:
        """No run's child is alive (every recorded run is still queued) and nothing of this
        run of the workflow is pending: a continue-as-new now races no event."""
        return (
            not self._starts
            and not self._redeliveries
            and not self._lifecycle.tasks
            and all(run.state == RunStatus.QUEUED for run in self._core.state.runs.values())
        )

    def _continue_as_new_after_events(self) -> int:
        return self._settings.continue_as_new_after_events or DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._continue_as_new_after_events()
        )

    def _emit(self, run: Run, event_type: str, now: int, **fields: Any) -> None:
        self._emit_event(run.scheduled_time, event_type, now, **fields)

    def _emit_event(self, scheduled_time: int, event_type: str, now: int, **fields: Any) -> None:
        key = idempotency_key(self._object_id, scheduled_time)
        self._lifecycle.emit(lifecycle_event(event_type, key, scheduled_time, now, **fields))

    async def _start_run(self, run: Run, settle_by_signal: bool) -> None:
        run_input = ScheduledRunInput(
            run=ScheduledRunObject(
                object_id=self._object_id,
                scheduled_time=run.scheduled_time,
                due_at=run.due_at,
                idempotency_key=idempotency_key(self._object_id, run.scheduled_time),
                params=run.params,
            ),
            schedule_workflow_id=workflow.info().workflow_id,
            settings=self._settings,
            acknowledge_by_completion=workflow.patched(SCHEDULE_PATCH),
            settle_by_signal=settle_by_signal,
        )
        try:
            handle = await workflow.start_child_workflow(
                ScheduledRunWorkflow.run,
                run_input,
                id=run_workflow_id(self._object_id, run.scheduled_time),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                static_summary=f"run {_iso(run.scheduled_time)} of {self._object_id}",
            )
            watch = asyncio.create_task(self._watch_run(run.scheduled_time, handle))
            self._watches[run.scheduled_time] = watch
            watch.add_done_callback(lambda _: self._watches.pop(run.scheduled_time, None))
        except WorkflowAlreadyStartedError:
            # At most once (S6): this run already exists (e.g. after a reset); it reports.
            workflow.logger.warning(
                "run %s of %s already started; not starting it again",
                run.scheduled_time,
                self._object_id,
            )
            self._core.forget(run.scheduled_time)
            self._dirty = True
            self._record_progress(refused=run.scheduled_time)

    async def _watch_run(
        self,
        scheduled_time: int,
        handle: workflow.ChildWorkflowHandle[Any, ScheduledRunResult],
    ) -> None:
        """The run's completion settles it (if its signal did not) and acknowledges it."""
        try:
            result = await handle
        except ChildWorkflowError as error:
            # Terminated or failed from outside: it will never report. Free its slot.
            workflow.logger.error(
                "run %s of %s ended without reporting: %s", scheduled_time, self._object_id, error
            )
            result = ScheduledRunResult(
                outcome=_errored(RUN_INTERRUPTED_ERROR, f"the run workflow ended: {error}"),
                delivered=False,
            )
        self._settle(scheduled_time, result.outcome)
        if result.dead_letter_error is not None:
            self._core.record_dead_letter(
                scheduled_time,
                idempotency_key(self._object_id, scheduled_time),
                result.outcome,
                result.dead_letter_error,
            )
        self._acknowledge(scheduled_time)
        # A run's end frees a slot and forgets the run: decision state. See workflows.barrier.
        self._record_progress(acknowledged=scheduled_time)

    def _record_progress(self, **extra: int) -> None:
        running = self._core.running_count()
        record_progress({"running": running, "queued": self._core.queued_count(), **extra})

    async def _hand_over_runs(self) -> None:
        """Before continuing as new: every run this workflow still watches acknowledges by
        signal from now on (see `workflows.handover`)."""
        await hand_over(
            [
                (run_workflow_id(self._object_id, scheduled_time), watch)
                for scheduled_time, watch in list(self._watches.items())
            ]
        )

    def _publish(self) -> None:
        """Upsert the search attributes that changed, and the UI's current details."""
        stored = self._core.state.schedule
        wake_at = self._core.next_wake_at()
        updates: list[Any] = []
        if self._object_id != self._published.get("object_id"):
            updates.append(search_attributes.OBJECT_ID.value_set(self._object_id))
            self._published["object_id"] = self._object_id
        if self._next_tick_stale(wake_at):
            updates.append(
                search_attributes.NEXT_TICK_AT.value_unset()
                if wake_at is None
                else search_attributes.NEXT_TICK_AT.value_set(
                    datetime.fromtimestamp(wake_at / 1000, tz=UTC)
                )
            )
            self._published["next_tick_at"] = wake_at
        if stored is not None and stored.version != self._published.get("version"):
            updates.append(search_attributes.SCHEDULE_VERSION.value_set(stored.version))
            self._published["version"] = stored.version
        if updates:
            workflow.upsert_search_attributes(updates)
        workflow.set_current_details(self._details(wake_at))

    def _next_tick_stale(self, wake_at: int | None) -> bool:
        """Whether `DurabilityNextTickAt` needs an upsert: unset/set, moved earlier, or moved
        later by more than NEXT_TICK_PUBLISH_SLACK_MS. So the published value is never later
        than the real next tick, and at most a minute earlier."""
        if "next_tick_at" not in self._published:
            return True
        published = self._published["next_tick_at"]
        if wake_at == published:
            return False
        if wake_at is None or not isinstance(published, int):
            return True
        if wake_at < published or not workflow.patched(SCHEDULE_PATCH):
            return True
        return wake_at - published > NEXT_TICK_PUBLISH_SLACK_MS

    def _details(self, wake_at: int | None) -> str:
        """Markdown for the UI's "Current Details": the live schedule and its runs."""
        stored = self._core.state.schedule
        if stored is None or stored.expression is None:
            head = "No live schedule (never set, or cancelled)."
        else:
            head = (
                f"`{stored.expression}` version {stored.version}, jitter {stored.jitter_ms} ms  \n"
                f"Next tick: {'none' if wake_at is None else _iso(wake_at)}"
            )
        if self._core.state.paused:
            head = f"**Paused.** {head}"
        states = [run.state.value for run in self._core.state.runs.values()]
        counts = ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states))) or "none"
        return f"{head}  \nRuns awaiting acknowledgement: {counts}"

    # --- messages ---

    def _pick(self, max_ms: int) -> int:
        return workflow.random().randint(0, max_ms)

    def _apply_set(self, raw: Any) -> bool:
        now = _now_ms()
        applied = self._core.set(parse_set(raw, self.next_occurrence, now), now, self._pick)
        self._dirty = True
        return applied

    def _apply_cancel(self, raw: Any) -> bool:
        live = self._core.cancel(parse_cancel(raw))
        self._dirty = True
        return live

    def _drop(self, name: str, raw: Any, error: Exception) -> None:
        self._core.state.dropped_signals += 1
        workflow.logger.warning(
            "dropped bad %s signal (%d dropped so far): %s; payload %r",
            name,
            self._core.state.dropped_signals,
            error,
            raw,
        )

    @workflow.signal(name="set")
    def set_signal(self, raw: Any = None) -> None:
        """`set` as a signal: a bad payload is logged, counted and dropped (S2)."""
        try:
            self._apply_set(raw)
        except (InvalidRequest, ValueError) as error:
            self._drop("set", raw, error)

    @workflow.update(name="set")
    def set_update(self, raw: Any = None) -> bool:
        """`set` as an update: returns whether the version was stored (S3)."""
        return self._apply_set(raw)

    @set_update.validator
    def validate_set(self, raw: Any = None) -> None:
        """Reject a malformed `set` before anything is recorded."""
        try:
            parse_set(raw, self.next_occurrence, _now_ms())
        except ValueError as error:  # InvalidRequest, or a bad next_occurrence (S7)
            raise _reject(error) from None

    @workflow.signal(name="cancel")
    def cancel_signal(self, raw: Any = None) -> None:
        """`cancel` as a signal: a bad payload is logged, counted and dropped."""
        try:
            self._apply_cancel(raw)
        except InvalidRequest as error:
            self._drop("cancel", raw, error)

    @workflow.update(name="cancel")
    def cancel_update(self, raw: Any = None) -> bool:
        """`cancel` as an update: returns whether a schedule was live (S5)."""
        return self._apply_cancel(raw)

    @cancel_update.validator
    def validate_cancel(self, raw: Any = None) -> None:
        """Reject a malformed `cancel` before anything is recorded."""
        try:
            parse_cancel(raw)
        except InvalidRequest as error:
            raise _reject(error) from None

    @workflow.signal(name=RUN_SETTLED_SIGNAL)
    def run_settled(self, settled: RunSettled) -> None:
        """A run stopped: free its slot and start the next queued run."""
        self._settle(settled.scheduled_time, settled.outcome)

    def _settle(self, scheduled_time: int, outcome: Outcome) -> None:
        # Wake the loop only when a queued run can take the freed slot: every wake-up
        # cancels and restarts the tick timer (two more history events).
        if self._core.settle(scheduled_time, outcome) and self._core.queued_count():
            self._dirty = True

    @workflow.signal(name=RUN_ACKNOWLEDGED_SIGNAL)
    def run_acknowledged(self, acknowledged: RunAcknowledged) -> None:
        """A run's outcome was delivered (or dead-lettered): forget the run."""
        if acknowledged.outcome is not None and acknowledged.dead_letter_error is not None:
            self._core.record_dead_letter(
                acknowledged.scheduled_time,
                idempotency_key(self._object_id, acknowledged.scheduled_time),
                acknowledged.outcome,
                acknowledged.dead_letter_error,
            )
        self._acknowledge(acknowledged.scheduled_time)

    def _acknowledge(self, scheduled_time: int) -> None:
        run = self._core.state.runs.get(scheduled_time)
        held_slot = run is not None and run.state == RunStatus.RUNNING
        self._core.forget(scheduled_time)
        # A run nobody asked for its slot never signalled `run_settled`: this frees it.
        if held_slot and self._core.queued_count():
            self._dirty = True

    # --- pause, trigger, backfill (beyond the seed; what native Schedules users expect) ---

    @workflow.update(name="pause")
    def pause(self, raw: Any = None) -> bool:
        """Stop ticks (runs already recorded go on); returns whether it was running."""
        self._dirty = True
        return self._core.pause()

    @workflow.update(name="unpause")
    def unpause(self, raw: Any = None) -> bool:
        """Tick again from now; ticks missed while paused are skipped. Returns whether paused."""
        self._dirty = True
        return self._core.unpause(_now_ms())

    @workflow.update(name="trigger")
    def trigger(self, raw: Any = None) -> int:
        """Record a run now, outside the expression; returns its scheduled_time."""
        now = _now_ms()
        run = self._core.trigger(now)
        self._emit_recorded([run], now)
        return run.scheduled_time

    @trigger.validator
    def validate_trigger(self, raw: Any = None) -> None:
        """Reject a trigger with no live schedule, or no room for its run."""
        try:
            self._core.check_live("trigger")
            self._core.check_room(1, "trigger")
        except InvalidRequest as error:
            raise _reject(error) from None

    @workflow.update(name="backfill")
    def backfill(self, raw: Any = None) -> list[int]:
        """Record runs for the occurrences in a past range; returns their scheduled times."""
        now = _now_ms()
        start_at, end_at = parse_backfill(raw, now)
        runs = self._core.backfill(start_at, end_at)
        self._emit_recorded(runs, now)
        return [run.scheduled_time for run in runs]

    @backfill.validator
    def validate_backfill(self, raw: Any = None) -> None:
        """Reject a malformed, future or too large range before anything is recorded."""
        try:
            start_at, end_at = parse_backfill(raw, _now_ms())
            self._core.check_room(
                len(self._core.unrecorded_backfill_times(start_at, end_at)), "backfill"
            )
        except InvalidRequest as error:
            raise _reject(error) from None

    def _emit_recorded(self, runs: list[Run], now: int) -> None:
        queued = self._core.running_count() >= self._core.max_concurrent_runs
        for run in runs:
            self._emit(run, "due", now, queued=queued)
        self._dirty = True

    @workflow.query(name="paused")
    def paused(self) -> bool:
        """Whether ticks are paused (an addition to the seed's contract, docs/contract.md)."""
        return self._core.state.paused

    @workflow.query(name="get")
    def get(self) -> dict[str, Any] | None:
        """The live schedule, or None."""
        return self._core.get()

    @workflow.query(name="runs")
    def runs(self) -> list[dict[str, Any]]:
        """Every run not yet acknowledged."""
        return self._core.runs()

    @workflow.query(name="skipped_ticks")
    def skipped_ticks(self) -> int:
        """Ticks skipped: queue full, overlap policy or state budget (docs/contract.md)."""
        return self._core.state.skipped_ticks

    @workflow.query(name="dead_letters")
    def dead_letters(self) -> list[dict[str, Any]]:
        """Outcomes whose delivery was given up, oldest first (docs/contract.md)."""
        return [letter.wire() for letter in self._core.state.dead_letters]

    @workflow.update(name="redeliver")
    def redeliver(self, raw: Any = None) -> bool:
        """Deliver a dead-lettered outcome again, as it was, under the same retry policy;
        returns at once (true); the letter leaves `dead_letters` once delivered."""
        letter = self._core.redeliverable(parse_redeliver(raw))
        letter.redelivering = True
        task = asyncio.create_task(self._redeliver(letter))
        self._redeliveries.add(task)
        task.add_done_callback(self._redeliveries.discard)
        return True

    @redeliver.validator
    def validate_redeliver(self, raw: Any = None) -> None:
        """Reject a key with no dead letter, or one being redelivered."""
        try:
            self._core.redeliverable(parse_redeliver(raw))
        except InvalidRequest as error:
            raise _reject(error) from None

    async def _redeliver(self, letter: DeadLetter) -> None:
        run = ScheduledRunObject(
            object_id=self._object_id,
            scheduled_time=letter.scheduled_time,
            due_at=letter.due_at,
            idempotency_key=letter.idempotency_key,
            params=letter.params,
        )
        error = await deliver_outcome(self._settings, run, letter.outcome)
        self._core.redelivered(letter.idempotency_key, error)
        # The letter left the list (or may be redelivered again): a `redeliver` validator
        # decides on it, so this completion's task sends a command. See workflows.barrier.
        self._record_progress(redelivered=letter.scheduled_time)

    @workflow.query(name="dropped_signals")
    def dropped_signals(self) -> int:
        """How many malformed signals were dropped (docs/contract.md)."""
        return self._core.state.dropped_signals


@workflow.defn(name="ScheduledRun", sandboxed=SANDBOXED)
class ScheduledRunWorkflow:
    """One run: call the run activity once, report to the schedule, deliver the outcome."""

    def __init__(self) -> None:
        self._report_by_signal = False

    @workflow.signal(name=REPORT_BY_SIGNAL)
    def report_by_signal(self) -> None:
        """The schedule continued as new: report by signal, not by completing."""
        self._report_by_signal = True

    @workflow.run
    async def run(self, input: Any) -> ScheduledRunResult:
        """Run (S9, S10), settle, deliver the outcome at least once (S11), acknowledge."""
        # Validated here, not by the converter: started by hand with a bad input, the run
        # fails once, naming the field, instead of failing every workflow task.
        try:
            run_input = ScheduledRunInput.model_validate(input)
        except ValidationError as error:
            raise ApplicationError(
                f"invalid ScheduledRun input: {error}",
                type="InvalidScheduledRunInput",
                non_retryable=True,
            ) from None
        self._input = input = run_input
        self._lifecycle = _Lifecycle(input.settings)
        self._emit("started")
        started = _now_ms()
        outcome = await self._execute()
        settled: dict[str, Any] = {"outcome": outcome.status}
        if outcome.error is not None:
            settled["error"] = outcome.error.model_dump()
        if outcome.error is None or outcome.error.name != RUN_INTERRUPTED_ERROR:
            settled["duration_ms"] = _now_ms() - started
        self._emit("settled", **settled)
        settled_signal = RunSettled(scheduled_time=input.run.scheduled_time, outcome=outcome)
        acknowledged = RunAcknowledged(scheduled_time=input.run.scheduled_time)
        if not (input.acknowledge_by_completion and workflow.patched(RUN_PATCH)):
            await self._signal_schedule(RUN_SETTLED_SIGNAL, settled_signal)
            dead_letter = await self._deliver(outcome)
            await self._signal_schedule(
                RUN_ACKNOWLEDGED_SIGNAL, _acknowledgement(acknowledged, outcome, dead_letter)
            )
            await self._lifecycle.drain()
            return ScheduledRunResult(
                outcome=outcome, delivered=dead_letter is None, dead_letter_error=dead_letter
            )
        # The completion reports the run's end and its outcome's delivery at once, unless
        # this run took its schedule's last free slot (`settle_by_signal`) or the schedule no
        # longer watches it (it continued as new): then the run's end is signalled as soon as
        # it is known. The schedule never signals a run that may be completing (only the rare
        # hand-over does), so nothing races this run's completion.
        delivery = asyncio.create_task(self._deliver(outcome))
        if not input.settle_by_signal:
            await workflow.wait_condition(lambda: delivery.done() or self._report_by_signal)
        if not delivery.done():
            await self._signal_schedule(RUN_SETTLED_SIGNAL, settled_signal)
        dead_letter = await delivery
        await self._lifecycle.drain()
        # No await between this check and returning: a hand-over signal that lands while this
        # task completes makes Temporal reject the completion, and the retried task sees it.
        if self._report_by_signal:
            await self._signal_schedule(
                RUN_ACKNOWLEDGED_SIGNAL, _acknowledgement(acknowledged, outcome, dead_letter)
            )
        return ScheduledRunResult(
            outcome=outcome, delivered=dead_letter is None, dead_letter_error=dead_letter
        )

    def _emit(self, event_type: str, **fields: Any) -> None:
        run = self._input.run
        self._lifecycle.emit(
            lifecycle_event(
                event_type, run.idempotency_key, run.scheduled_time, _now_ms(), **fields
            )
        )

    async def _execute(self) -> Outcome:
        settings = self._input.settings
        heartbeat = settings.run_heartbeat_timeout_ms
        handle = workflow.start_activity(
            settings.run_activity,
            self._input.run,
            task_queue=settings.activity_task_queue,
            start_to_close_timeout=timedelta(milliseconds=settings.run_timeout_ms)
            + RUN_CANCEL_GRACE,
            heartbeat_timeout=None if heartbeat is None else timedelta(milliseconds=heartbeat),
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=f"run {self._input.run.idempotency_key}",
        )
        timed_out = cancelled = False
        try:
            await workflow.wait_condition(
                handle.done,
                timeout=timedelta(milliseconds=settings.run_timeout_ms),
                timeout_summary="run timeout",
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
            return _errored(
                RUN_TIMEOUT_ERROR, f"run exceeded run_timeout_ms={settings.run_timeout_ms}"
            )
        if cancelled:
            return _errored(RUN_INTERRUPTED_ERROR, "the run was cancelled before it finished")
        if failure is None:
            return Outcome(status="complete")
        return _errored_from(failure)

    async def _deliver(self, outcome: Outcome) -> RunError | None:
        return await deliver_outcome(self._input.settings, self._input.run, outcome, self._emit)

    async def _signal_schedule(self, signal: str, payload: RunSettled | RunAcknowledged) -> None:
        handle = workflow.get_external_workflow_handle(self._input.schedule_workflow_id)
        try:
            await handle.signal(signal, payload)
        except (FailureError, ApplicationError) as error:
            # The schedule is gone (terminated); the run still delivers its outcome.
            workflow.logger.warning("could not signal %s to the schedule: %s", signal, error)


def _acknowledgement(
    acknowledged: RunAcknowledged, outcome: Outcome, dead_letter: RunError | None
) -> RunAcknowledged:
    """The `run_acknowledged` signal: with the outcome and its error when dead-lettered, so
    the schedule can keep it for `dead_letters` / `redeliver`."""
    if dead_letter is None:
        return acknowledged
    return acknowledged.model_copy(
        update={"dead_lettered": True, "outcome": outcome, "dead_letter_error": dead_letter}
    )


async def deliver_outcome(
    settings: ScheduleInput,
    run: ScheduledRunObject,
    outcome: Outcome,
    emit: Callable[..., None] | None = None,
) -> RunError | None:
    """Call the outcome activity under `outcome_retries` (S11); None when delivered, else the
    error it was dead-lettered with (logged, and emitted as `dead_lettered` when `emit`)."""
    retries = settings.outcome_retries
    try:
        await workflow.execute_activity(
            settings.outcome_activity,
            args=[run, outcome.wire()],
            task_queue=settings.activity_task_queue,
            start_to_close_timeout=timedelta(milliseconds=settings.outcome_timeout_ms),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=retries.initial_interval_ms),
                backoff_coefficient=retries.backoff_coefficient,
                maximum_interval=timedelta(milliseconds=retries.maximum_interval_ms),
                maximum_attempts=retries.max_attempts,
            ),
            summary=f"outcome {run.idempotency_key}",
        )
        return None
    except ActivityError as failure:
        error = _error_of(failure.cause, timeout_name=OUTCOME_TIMEOUT_ERROR)
        attempt = (
            retries.max_attempts
            if failure.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED
            else 0
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


def _errored(name: str, message: str) -> Outcome:
    return Outcome(status="errored", error=RunError(name=name, message=message))


def _errored_from(failure: BaseException) -> Outcome:
    cause = failure.cause if isinstance(failure, ActivityError) else failure
    error = _error_of(cause, timeout_name=RUN_INTERRUPTED_ERROR)
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
