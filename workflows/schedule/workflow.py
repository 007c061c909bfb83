"""`DurabilitySchedule`, one per object: the Temporal shell around `core.ScheduleCore`.

The core decides (ticks, versions, slots, the queue, dead letters); this shell turns its
decisions into a tick timer, a `ScheduledRun` child per run (`workflows.schedule.run`), the
delivery of each run's outcome once the run stopped (`workflows.schedule.redelivery`),
search attributes (`publish.py`), and continue-as-new once the history is long and every
run has ended (`drain.py`). A deployment brings its own `next_occurrence` by subclassing
(docs/contract.md, 2.6 "Expressions", has the example).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from workflows import SANDBOXED, metrics
    from workflows.kernel import (
        NO_INPUT,
        ShellKernel,
        decode_start_input,
        now_ms,
        read_message,
        rejected_as,
    )
    from workflows.schedule import SCHEDULE_WORKFLOW_TYPE, cron, status
    from workflows.schedule.core import (
        Closing,
        DeadLetter,
        InvalidRequest,
        Run,
        ScheduleCore,
        ScheduleWorkflowInput,
        Skipped,
        initial_state,
        parse_backfill,
        parse_cancel,
        parse_configure,
        parse_describe,
        parse_pause,
        parse_redeliver,
        parse_set,
        parse_start,
        settings_of,
    )
    from workflows.schedule.day_rule import DayRule
    from workflows.schedule.drain import Drain
    from workflows.schedule.lifecycle import Lifecycle
    from workflows.schedule.models import (
        RUN_ACKNOWLEDGED_SIGNAL,
        RUN_SETTLED_SIGNAL,
        RunAcknowledged,
        RunSettled,
        idempotency_key,
        lifecycle_event,
    )
    from workflows.schedule.preview import daylight_saving
    from workflows.schedule.publish import Published
    from workflows.schedule.redelivery import Deliveries, Redeliveries
    from workflows.schedule.run import STARTS, WATCHES, RunReports
    from workflows.schedule.set_rules import parse_new_set, request_refusal
    from workflows.validation import CARRIED_CONTEXT


# Recorded when a cancellation request reaches a run: it then closes only once every run it
# started has reported (a run recorded before closed at once).
CLOSE_AFTER_RUNS_ON_CANCEL_PATCH = "close-after-runs-on-cancel"
# Recorded, first in a run, by a schedule whose start input sets a bound on its life
# (`catchup_window_ms`, `start_at`, `end_at`, `remaining_runs`, `pause_on_failure`): a run
# recorded by a build that ignored those fields replays without them.
SCHEDULE_BOUNDS_PATCH = "schedule-bounds"
# Recorded when a cancellation request reaches a run that had stopped its outcome deliveries
# to continue as new: the cancellation lifts the stop, so the run delivers what it owes and
# closes (a run recorded before waited for deliveries that could no longer start).
DELIVER_WHILE_CANCELLING_PATCH = "deliver-while-cancelling"
# Recorded when a signal reaches a schedule closing as cancelled: it is dropped and counted
# (a run recorded before applied it, and lost it with the close).
DROP_WHILE_CLOSING_PATCH = "drop-signals-while-closing"
# Recorded when a `trigger` falls on a time a run (or the pending tick) already holds: it
# records its own run at the next free millisecond (a run recorded before merged into it).
DISTINCT_TRIGGER_TIMES_PATCH = "distinct-trigger-times"
# Recorded when a cancellation request reaches a run: it publishes its state memo `closing`
# (a run recorded before left it `live` until the close).
PUBLISH_CLOSING_PATCH = "publish-closing-state"


@workflow.defn(name=SCHEDULE_WORKFLOW_TYPE, sandboxed=SANDBOXED)
class DurabilityScheduleWorkflow:
    """One object's recurring schedule (S1-S8, S13): never completes on its own."""

    @workflow.init
    def __init__(self, input: RawValue = NO_INPUT) -> None:
        # Decoded and validated here, not by the converter: a start input the converter
        # cannot read would fail every workflow task; this way the schedule fails once.
        self._start = parse_start(lambda: decode_start_input(input), workflow.info().workflow_id)
        self._settings, carried = self._start.settings, self._start.carried
        # Here, not in `run`: the first task's messages are handled before `run` begins. A
        # run recorded without the marker runs as the build that recorded it: unbounded.
        if self._settings.bounded() and not workflow.patched(SCHEDULE_BOUNDS_PATCH):
            self._settings = self._settings.without_bounds()
        self._object_id = self._settings.object_id or ""
        self._core = ScheduleCore(
            carried or initial_state(self._settings), self.next_occurrence, self._settings
        )
        # A bad signal payload raises InvalidRequest, a bad next_occurrence ValueError (S7).
        self._kernel = ShellKernel(ValueError, self._core.count_dropped_signal)
        self._day_rule = DayRule(
            self._core, type(self).next_occurrence is DurabilityScheduleWorkflow.next_occurrence
        )
        self._lifecycle = Lifecycle(self._settings)
        self._redeliveries = Redeliveries(
            self._settings, self._core, self._kernel, self._redelivered
        )
        self._deliveries = Deliveries(
            self._settings,
            self._core,
            self._kernel,
            lambda t, event_type, **fields: self._emit(t, event_type, now_ms(), **fields),
            self._send_progress,
        )
        self._runs = RunReports(
            self._settings, self._core, self._kernel, self._send_progress, self._deliveries.stopped
        )
        self._drain = Drain(self._settings.continue_as_new_after_events)
        self._published = Published(self._object_id)

    def next_occurrence(self, expression: str, after_ms: int) -> int | None:
        """The first tick of `expression` strictly after `after_ms`; override to plug in."""
        return cron.next_occurrence(
            expression,
            after_ms,
            classic_day_rule=self._day_rule.classic,
            crontab_reading=self._day_rule.crontab,
            dst=daylight_saving(self._settings.dst_policy),
        )

    @workflow.run
    async def run(self, input: RawValue = NO_INPUT) -> None:
        """Tick, start runs, sleep until the next tick or a message; continue-as-new. A
        cancellation request (the UI's Request Cancellation) closes the schedule as cancelled
        once every run it started has reported."""
        start = self._start
        self._kernel.check_start(start.error, start.coerced, "InvalidScheduleInput", start.bad_id)
        self._redeliveries.resume_stranded()
        self._deliveries.resume()
        try:
            await self._tick_until_history_is_long()
        except asyncio.CancelledError:
            if not workflow.patched(CLOSE_AFTER_RUNS_ON_CANCEL_PATCH):
                raise
            workflow.logger.info(
                "%s: cancellation requested; closing once its runs report", self._object_id
            )
            self._begin_cancellation()
            await workflow.wait_condition(
                lambda: self._core.may_close_cancelled(
                    deliveries_going=self._deliveries.going(),
                    others_busy=self._kernel.busy(STARTS, WATCHES, Redeliveries.TASKS)
                    or bool(self._lifecycle.tasks)
                    or not workflow.all_handlers_finished(),
                )
            )
            raise
        carried = ScheduleWorkflowInput.model_validate(
            {**self._settings.model_dump(), "carried": self._core.state}, context=CARRIED_CONTEXT
        )
        workflow.continue_as_new(carried.model_dump(mode="json"))

    def _begin_cancellation(self) -> None:
        """Tell the core the run closes as cancelled, and start the deliveries it then says
        to start (those a continue-as-new close had stopped)."""
        lifts_stop = self._core.deliveries_stopped() and self._deliveries.pending() > 0
        if lifts_stop and not workflow.patched(DELIVER_WHILE_CANCELLING_PATCH):
            return  # recorded before: the run waits with its deliveries stopped
        self._core.begin_cancellation()
        if workflow.patched(PUBLISH_CLOSING_PATCH):
            self._published.publish_closing()
        self._deliveries.pump()

    async def _tick_until_history_is_long(self) -> None:
        """The schedule's life in this run: tick and start runs until the history is long,
        then drain and hand over what still runs (then the run may continue as new)."""
        timer_fired = False
        while True:
            self._kernel.clear_wake()
            started = self._step(now_ms())
            self._drain.begin_if_due()
            if self._drain.going and self._drain_over():
                break
            wake_at = self._core.next_wake_at()
            if timer_fired and not started and wake_at is None:
                # The tick's timer fired and this task starts nothing and sets no new timer,
                # yet the tick may have queued a run: see workflows.kernel.
                self._send_progress()
            timer_fired = False
            try:
                await workflow.wait_condition(
                    self._woken,
                    timeout=None if wake_at is None else timedelta(milliseconds=wake_at - now_ms()),
                    timeout_summary="next tick"
                    if wake_at is None
                    else f"next tick {status.iso(wake_at)}",
                )
            except TimeoutError:
                timer_fired = True
        await self._kernel.close_when_safe(
            self._settle_before_closing,
            ready=lambda: not self._kernel.busy(STARTS) and not self._lifecycle.tasks,
        )

    async def _settle_before_closing(self) -> bool:
        """Hand over the runs still going, then stop the outcome deliveries still going (the
        undelivered are carried: `Deliveries.stop`) and wait for the lifecycle calls they
        made (a `dead_lettered`)."""
        await self._runs.hand_over_alive()
        await self._deliveries.stop()
        await workflow.wait_condition(lambda: not self._lifecycle.tasks)
        return True

    def _step(self, now: int) -> bool:
        """Tick if due and start what the free slots allow (none while draining); returns
        whether a run started."""
        self._day_rule.decide()
        due = self._core.tick(now)
        startable = [] if self._drain.going else self._core.take_startable(now)
        skipped = [s for s in (self._core.caught_up, due) if isinstance(s, Skipped)]
        for skip in skipped:
            workflow.logger.warning(
                "skipped the tick %s of %s: %s", skip.scheduled_time, self._object_id, skip.reason
            )
            self._emit(skip.scheduled_time, "skipped", now, reason=skip.reason)
        if due is not None and not isinstance(due, Skipped):
            self._emit(due.scheduled_time, "due", now, queued=due not in startable)
            metrics.record(metrics.QUEUE_DEPTH, self._core.queued_count())
        for run, last_slot in zip(startable, self._core.takes_last_slot(startable), strict=True):
            self._runs.start(run, settle_by_signal=last_slot)
        self._published.publish(
            self._core.state,
            self._core.next_wake_at(),
            self._core.next_fire_times(status.DETAILS_NEXT_TIMES),
        )
        return bool(startable)

    def _woken(self) -> bool:
        if self._drain.going:
            return self._kernel.woken or self._drain_over()
        return self._kernel.woken or self._drain.history_long()

    def _drain_over(self) -> bool:
        """Every run's child has ended and nothing of this run of the workflow is pending but
        outcome deliveries (stopped and carried when it closes), or the drain's allowance of
        events is spent."""
        return self._drain.over(
            self._core.drained(
                shell_busy=self._kernel.busy(STARTS, Redeliveries.TASKS)
                or bool(self._lifecycle.tasks)
            )
        )

    def _emit(self, scheduled_time: int, event_type: str, now: int, **fields: Any) -> None:
        key = idempotency_key(self._object_id, scheduled_time)
        self._lifecycle.emit(lifecycle_event(event_type, key, scheduled_time, now, **fields))

    def _send_progress(self, **extra: int) -> None:
        running, queued = self._core.running_count(), self._core.queued_count()
        self._kernel.progress({"running": running, "queued": queued, **extra})

    # --- messages: each handler routes its payload to the core through the kernel ---

    def _check_open(self, name: str) -> None:
        """For a signal: refuse it (dropped and counted) while the schedule closes as
        cancelled: applied, it would be lost with the close."""
        if self._core.closing is Closing.CANCELLED and workflow.patched(DROP_WHILE_CLOSING_PATCH):
            self._core.check_open(name)

    def _apply_set(self, raw: Any) -> bool:
        self._check_open("set")
        now = now_ms()
        request = parse_set(raw, self.next_occurrence, now)
        builtin = self._day_rule.builtin
        refused = request_refusal(request, self.next_occurrence, now, builtin=builtin)
        if refused is not None and self._day_rule.refuses_new_set():
            raise InvalidRequest(refused)
        self._day_rule.decide(request.expression)
        applied = self._core.set(request, now, lambda max_ms: workflow.random().randint(0, max_ms))
        self._kernel.wake()
        return applied

    def _apply_cancel(self, raw: Any) -> bool:
        self._check_open("cancel")
        live = self._core.cancel(parse_cancel(raw))
        self._kernel.wake()
        return live

    @workflow.signal(name="set")
    def set_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`set` as a signal: a bad payload is logged, counted and dropped (S2)."""
        self._kernel.signal("set", self._apply_set, raw)

    @workflow.update(name="set")
    def set_update(self, raw: RawValue = NO_INPUT) -> bool:
        """`set` as an update: returns whether the version was stored (S3)."""
        return self._kernel.update(self._apply_set, raw)

    @set_update.validator
    def validate_set(self, raw: RawValue = NO_INPUT) -> None:
        """Reject a malformed `set` before anything is recorded."""
        self._kernel.validate(self._core.check_open, "set")
        builtin = self._day_rule.builtin
        self._kernel.validate(parse_new_set, raw, self.next_occurrence, now_ms(), builtin=builtin)

    @workflow.signal(name="cancel")
    def cancel_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`cancel` as a signal: a bad payload is logged, counted and dropped."""
        self._kernel.signal("cancel", self._apply_cancel, raw)

    @workflow.update(name="cancel")
    def cancel_update(self, raw: RawValue = NO_INPUT) -> bool:
        """`cancel` as an update: returns whether a schedule was live (S5)."""
        return self._kernel.update(self._apply_cancel, raw)

    @cancel_update.validator
    def validate_cancel(self, raw: RawValue = NO_INPUT) -> None:
        """Reject a malformed `cancel` before anything is recorded."""
        self._kernel.validate(self._core.check_open, "cancel")
        self._kernel.validate(parse_cancel, raw)

    # --- configure: the start settings changed in place (docs/contract.md 2.2) ---

    def _apply_configure(self, raw: Any) -> dict[str, Any]:
        """Decide under the settings `raw` leaves from now on: runs, deliveries, redeliveries
        and lifecycle calls started after this take them, those going keep theirs; the next
        run of the workflow (continue-as-new) starts with them. It wakes the main loop (a
        higher `max_concurrent_runs` starts queued runs at once). Its validation reads only
        the settings, which only `configure` changes, so the validator's answer is the same
        whatever completion a cold worker applies in the same activation."""
        self._check_open("configure")
        settings = parse_configure(raw, self._settings)
        dst_changed = settings.dst_policy != self._settings.dst_policy
        self._settings = settings
        self._core.use_settings(settings)
        self._core.configure_bounds(settings, raw, now_ms())  # raw: the fields it set
        if dst_changed:  # the next tick as the new policy finds it, from now
            now = now_ms()
            self._core.revise_next_at(
                lambda expression, _: self._core.bounded_next(expression, now)
            )
        for part in (self._lifecycle, self._deliveries, self._redeliveries, self._runs):
            part.use_settings(settings)
        self._kernel.wake()
        return settings_of(settings)

    @workflow.signal(name="configure")
    def configure_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`configure` as a signal: a bad payload is logged, counted and dropped."""
        self._kernel.signal("configure", self._apply_configure, raw)

    @workflow.update(name="configure")
    def configure_update(self, raw: RawValue = NO_INPUT) -> dict[str, Any]:
        """`configure` as an update: returns the settings now in effect."""
        return self._kernel.update(self._apply_configure, raw)

    @configure_update.validator
    def validate_configure(self, raw: RawValue = NO_INPUT) -> None:
        """Reject an empty, unknown, fixed or out-of-bounds setting before anything is recorded."""
        self._kernel.validate(self._core.check_open, "configure")
        self._kernel.validate(parse_configure, raw, self._settings)

    @workflow.signal(name=RUN_SETTLED_SIGNAL)
    def run_settled(self, settled: RunSettled) -> None:
        """A run stopped: free its slot and start the next queued run."""
        self._runs.settled(settled)

    @workflow.signal(name=RUN_ACKNOWLEDGED_SIGNAL)
    def run_acknowledged(self, acknowledged: RunAcknowledged) -> None:
        """A handed-over run's outcome was delivered (or dead-lettered): forget the run."""
        self._runs.ended(
            acknowledged.scheduled_time, acknowledged.outcome, acknowledged.dead_letter_error
        )

    # --- pause, trigger, backfill, dead letters (beyond the rules S1-S14: docs/contract.md) ---

    @workflow.update(name="pause")
    def pause(self, raw: RawValue = NO_INPUT) -> bool:
        """Stop ticks (runs already recorded go on), with an optional `note` saying why;
        returns whether it was running."""
        self._kernel.wake()
        return self._kernel.update(lambda value: self._core.pause(parse_pause(value)), raw)

    @pause.validator
    def validate_pause(self, raw: RawValue = NO_INPUT) -> None:
        """Reject a note that is not a string, or too long, before anything is recorded."""
        self._kernel.validate(self._core.check_open, "pause")
        self._kernel.validate(parse_pause, raw)

    @workflow.signal(name="pause")
    def pause_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`pause` as a signal (what a batch operation can send): a bad note is logged,
        counted and dropped."""
        self._kernel.wake()
        self._kernel.signal("pause", self._pause_checked, raw)

    def _pause_checked(self, raw: Any) -> bool:
        self._check_open("pause")
        return self._core.pause(parse_pause(raw))

    @workflow.update(name="unpause")
    def unpause(self, raw: RawValue = NO_INPUT) -> bool:
        """Tick again from now; ticks missed while paused are skipped. Returns whether paused."""
        self._kernel.wake()
        self._day_rule.decide()
        return self._kernel.update(self._core.unpause, now_ms())

    @unpause.validator
    def validate_unpause(self, raw: RawValue = NO_INPUT) -> None:
        """Reject an unpause the schedule's `next_occurrence` fails on (S7) before anything is
        recorded (the handler would leave it unpaused with a stale `next_at`). Validators do
        not run on replay: a history that recorded such an update replays as it ran."""
        self._kernel.admit(raw)
        self._kernel.validate(self._core.check_open, "unpause")
        self._kernel.validate(self._core.check_unpause, now_ms())

    @workflow.signal(name="unpause")
    def unpause_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`unpause` as a signal; the payload is not used, but one too large or unreadable is
        dropped, and so is one the schedule's `next_occurrence` fails on (S7): counted, and
        the schedule stays paused."""
        self._kernel.wake()
        self._day_rule.decide()
        now = now_ms()
        self._kernel.signal("unpause", lambda _: self._unpause_checked(now), raw)

    def _unpause_checked(self, now: int) -> bool:
        # Ask `next_occurrence` before anything changes: a refusal then leaves the schedule
        # paused (`ScheduleCore.unpause` clears `paused` before it asks).
        self._check_open("unpause")
        self._core.check_unpause(now)
        return self._core.unpause(now)

    @workflow.update(name="trigger")
    def trigger(self, raw: RawValue = NO_INPUT) -> int:
        """Record a run now, outside the expression; returns its scheduled_time."""
        now = now_ms()
        # Each trigger its own run: one that falls on a time already held takes the next free
        # millisecond (a history recorded before merged it into the run holding the time).
        distinct = not self._core.trigger_merges(now) or workflow.patched(
            DISTINCT_TRIGGER_TIMES_PATCH
        )
        run = self._kernel.update(self._core.trigger, now, distinct=distinct)
        self._emit_recorded([run], now)
        return run.scheduled_time

    @trigger.validator
    def validate_trigger(self, raw: RawValue = NO_INPUT) -> None:
        """Reject a trigger with no live schedule, or no room for its run."""
        self._kernel.admit(raw)
        self._kernel.validate(self._core.check_open, "trigger")
        self._kernel.validate(self._core.check_live, "trigger")
        self._kernel.validate(self._core.check_room, 1, "trigger")

    @workflow.update(name="backfill")
    def backfill(self, raw: RawValue = NO_INPUT) -> list[int]:
        """Record runs for the occurrences in a past range; returns their scheduled times."""
        now = now_ms()
        self._day_rule.decide()
        runs = self._kernel.update(
            lambda value: self._core.backfill(*parse_backfill(value, now)), raw
        )
        self._emit_recorded(runs, now)
        return [run.scheduled_time for run in runs]

    @backfill.validator
    def validate_backfill(self, raw: RawValue = NO_INPUT) -> None:
        """Reject a malformed, future or too large range before anything is recorded."""
        self._kernel.validate(self._core.check_open, "backfill")
        self._kernel.validate(self._check_backfill, raw)

    def _check_backfill(self, raw: Any) -> None:
        start_at, end_at = parse_backfill(raw, now_ms())
        unrecorded = self._core.unrecorded_backfill_times(start_at, end_at)
        self._core.check_room(len(unrecorded), "backfill")

    def _emit_recorded(self, runs: list[Run], now: int) -> None:
        queued = self._core.new_runs_wait()
        for run in runs:
            self._emit(run.scheduled_time, "due", now, queued=queued)
        self._kernel.wake()

    @workflow.update(name="redeliver")
    def redeliver(self, raw: RawValue = NO_INPUT) -> bool:
        """Deliver a dead-lettered outcome again, as it was, under the same retry policy;
        returns at once (true); the letter leaves `dead_letters` once delivered."""
        letter = self._kernel.update(
            lambda value: self._core.begin_redelivery(parse_redeliver(value)), raw
        )
        self._redeliveries.start(letter)
        return True

    @redeliver.validator
    def validate_redeliver(self, raw: RawValue = NO_INPUT) -> None:
        """Reject a key with no dead letter, or one being redelivered."""
        self._kernel.validate(self._core.check_open, "redeliver")
        self._kernel.validate(lambda value: self._core.redeliverable(parse_redeliver(value)), raw)

    def _redelivered(self, letter: DeadLetter) -> None:
        # The letter left the list (or may be redelivered again): a `redeliver` validator
        # decides on it, so this completion's task sends a command. See workflows.kernel.
        self._send_progress(redelivered=letter.scheduled_time)

    # --- queries ---

    @workflow.query(name="get")
    def get(self) -> dict[str, Any] | None:
        """The live schedule, or None."""
        return self._core.get()

    @workflow.query(name="describe")
    def describe(self, raw: RawValue = NO_INPUT) -> dict[str, Any]:
        """The live schedule, `paused`, the last runs that ended, the next fire times and the
        counters; `{"runs": n, "next": n}` sizes the lists."""
        with rejected_as(InvalidRequest):
            query = parse_describe(read_message("describe query argument", raw))
        return self._core.describe(query)

    @workflow.query(name="runs")
    def runs(self) -> list[dict[str, Any]]:
        """Every run not yet acknowledged."""
        return self._core.runs()

    @workflow.query(name="paused")
    def paused(self) -> bool:
        """Whether ticks are paused."""
        return self._core.state.paused

    @workflow.query(name="pause_note")
    def pause_note(self) -> str | None:
        """Why the schedule is paused (`pause`'s note, or the failed run that paused it under
        `pause_on_failure`), or None."""
        return self._core.state.pause_note

    @workflow.query(name="skipped_ticks")
    def skipped_ticks(self) -> int:
        """Ticks skipped: queue full, overlap policy, state budget or catchup window."""
        return self._core.state.skipped_ticks

    @workflow.query(name="dead_letters")
    def dead_letters(self) -> list[dict[str, Any]]:
        """Outcomes whose delivery was given up, oldest first."""
        return [letter.wire() for letter in self._core.state.dead_letters]

    @workflow.query(name="settings")
    def settings(self) -> dict[str, Any]:
        """The start settings in effect (as changed by `configure`)."""
        return settings_of(self._settings)

    @workflow.query(name="dropped_signals")
    def dropped_signals(self) -> int:
        """How many malformed signals were dropped."""
        return self._core.state.dropped_signals
