"""`DurabilitySchedule`, one per object: catalog -> core -> effects.

Its handlers are registered from its catalog (`messages.py`); each reads its payload strictly
and calls the core's transition, directly or through an `apply_<name>` / `check_<name>` below.
The core (`core.ScheduleCore`) decides; this shell carries it out: a tick timer, a
`ScheduledRun` child per run (`reports.py`), the delivery of each finished run's outcome
(`delivery.py`), search attributes (`publish.py`), continue-as-new (`drain.py`). A deployment
brings its own `next_occurrence` by subclassing (docs/contract.md, 2.6 "Expressions").
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from workflows import SANDBOXED
    from workflows.catalog import Message
    from workflows.handlers import CatalogShell, handlers_from
    from workflows.kernel import NO_INPUT, ShellKernel, decode_start_input, now_ms
    from workflows.schedule import SCHEDULE_WORKFLOW_TYPE, cron, models, patches, status
    from workflows.schedule.core import (
        Closing,
        InvalidRequest,
        ScheduleCore,
        initial_state,
        read_start,
        settings_of,
    )
    from workflows.schedule.day_rule import DayRule
    from workflows.schedule.delivery import Deliveries, Redeliveries, send_progress
    from workflows.schedule.drain import Drain
    from workflows.schedule.lifecycle import Lifecycle
    from workflows.schedule.messages import SCHEDULE_MESSAGES
    from workflows.schedule.preview import daylight_saving
    from workflows.schedule.publish import Published
    from workflows.schedule.reports import STARTS, WATCHES, RunReports
    from workflows.schedule.set_rules import request_refusal

# The updates whose handler, not only their validator, refuses them while the schedule closes
# as cancelled (a signal always does): the others apply what their validator accepted.
CHECKED_OPEN_IN_HANDLER = frozenset({"set", "cancel", "configure"})


@workflow.defn(name=SCHEDULE_WORKFLOW_TYPE, sandboxed=SANDBOXED)
@handlers_from(SCHEDULE_MESSAGES)
class DurabilityScheduleWorkflow(CatalogShell):
    """One object's recurring schedule (S1-S8, S13): never completes on its own."""

    _core: ScheduleCore

    @workflow.init
    def __init__(self, input: RawValue = NO_INPUT) -> None:
        # Decoded and validated here, not by the converter: a start input the converter
        # cannot read would fail every workflow task; this way the schedule fails once.
        self._start = read_start(lambda: decode_start_input(input), workflow.info().workflow_id)
        self._settings, carried = self._start.settings, self._start.carried
        # Here, not in `run`: the first task's messages are handled before `run` begins.
        if self._settings.bounded() and not workflow.patched(patches.SCHEDULE_BOUNDS_PATCH):
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
        self._redeliveries = Redeliveries(self._settings, self._core, self._kernel)
        self._deliveries = Deliveries(self._settings, self._core, self._kernel, self._lifecycle)
        self._runs = RunReports(self._settings, self._core, self._kernel, self._deliveries)
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
        cancellation request closes the schedule once every run it started has reported."""
        start = self._start
        self._kernel.check_start(start.error, start.coerced, "InvalidScheduleInput", start.bad_id)
        self._redeliveries.resume_stranded()
        self._deliveries.resume()
        try:
            await self._tick_until_history_is_long()
        except asyncio.CancelledError:
            if not workflow.patched(patches.CLOSE_AFTER_RUNS_ON_CANCEL_PATCH):
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
        workflow.continue_as_new(self._core.next_run_input())

    def _begin_cancellation(self) -> None:
        """Tell the core the run closes as cancelled, and start the deliveries it then says
        to start (those a continue-as-new close had stopped)."""
        lifts_stop = self._core.deliveries_stopped() and self._deliveries.pending() > 0
        if lifts_stop and not workflow.patched(patches.DELIVER_WHILE_CANCELLING_PATCH):
            return  # as recorded without the patch: the run waits with its deliveries stopped
        self._core.begin_cancellation()
        if workflow.patched(patches.PUBLISH_CLOSING_PATCH):
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
                send_progress(self._kernel, self._core)
            timer_fired = False
            summary = "next tick" if wake_at is None else f"next tick {status.iso(wake_at)}"
            timeout = None if wake_at is None else timedelta(milliseconds=wake_at - now_ms())
            try:
                await workflow.wait_condition(self._woken, timeout=timeout, timeout_summary=summary)
            except TimeoutError:
                timer_fired = True
        await self._kernel.close_when_safe(
            self._hand_over_before_closing,
            ready=lambda: not self._kernel.busy(STARTS) and not self._lifecycle.tasks,
        )

    async def _hand_over_before_closing(self) -> bool:
        """Hand over the runs still going, stop the outcome deliveries going (the undelivered
        are carried) and wait for the lifecycle calls they made (a `dead_lettered`)."""
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
        queued = due is not None and due not in startable
        depth = self._core.queued_count()
        self._lifecycle.emit_tick(due, self._core.caught_up, now, queued=queued, depth=depth)
        for run, last_slot in zip(startable, self._core.takes_last_slot(startable), strict=True):
            self._runs.start(run, report_by_signal=last_slot)
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
        busy = self._kernel.busy(STARTS, Redeliveries.TASKS) or bool(self._lifecycle.tasks)
        return self._drain.over(self._core.drained(shell_busy=busy))

    # --- messages (`workflows.schedule.messages`): the catalog's hooks, then one method each

    def _first(self, message: Message) -> None:
        if message.name in ("unpause", "backfill"):
            self._day_rule.decide()  # they compute times of the stored expression

    def _screen(self, message: Message, *, validating: bool) -> None:
        """Refuse a user's message while the schedule closes as cancelled: applied, it would
        be lost with the close (a signal is dropped and counted)."""
        if message.internal:
            return
        if validating:
            self._core.check_open(message.name)
            return
        checked = message.name in CHECKED_OPEN_IN_HANDLER or not _in_update()
        closing = self._core.closing is Closing.CANCELLED
        if checked and closing and workflow.patched(patches.DROP_WHILE_CLOSING_PATCH):
            self._core.check_open(message.name)

    def _parse(self, message: Message, value: Any) -> Any:
        return message.parse(
            value, {models.NOW_MS: now_ms(), models.NEXT_OCCURRENCE: self.next_occurrence}
        )

    def _set_refusal(self, request: models.SetRequest, now: int) -> str | None:
        builtin = self._day_rule.builtin
        return request_refusal(request, self.next_occurrence, now, builtin=builtin)

    def check_set(self, request: models.SetRequest) -> None:
        if (refused := self._set_refusal(request, now_ms())) is not None:
            raise InvalidRequest(refused)

    def apply_set(self, request: models.SetRequest) -> bool:
        now = now_ms()
        refused = self._set_refusal(request, now)
        if refused is not None and self._day_rule.refuses_new_set():
            raise InvalidRequest(refused)
        self._day_rule.decide(request.expression)
        return self._core.set(request, now, lambda max_ms: workflow.random().randint(0, max_ms))

    def check_configure(self, fields: Any) -> None:
        self._core.check_configure(fields)

    def apply_configure(self, fields: Any) -> dict[str, Any]:
        """Runs, deliveries, redeliveries and lifecycle calls started from now on take the
        new settings, those going keep theirs; the next continue-as-new carries them."""
        self._settings = settings = self._core.configure(fields, now_ms())
        for part in (self._lifecycle, self._deliveries, self._redeliveries, self._runs):
            part.use_settings(settings)
        return settings_of(settings)

    def apply_pause(self, request: models.PauseRequest) -> bool:
        return self._core.pause(request.note)

    def check_unpause(self, _: Any) -> None:
        self._core.check_unpause(now_ms())

    def apply_unpause(self, _: Any) -> bool:
        now = now_ms()
        if not _in_update():
            # A signal is dropped, the schedule left paused, when `next_occurrence` fails (S7):
            # `ScheduleCore.unpause` clears `paused` before it asks.
            self._core.check_unpause(now)
        return self._core.unpause(now)

    def check_trigger(self, _: Any) -> None:
        self._core.check_live("trigger")
        self._core.check_room(1, "trigger")

    def apply_trigger(self, _: Any) -> int:
        now = now_ms()
        # Each trigger its own run (the patch is asked only where it changes the time).
        merges = self._core.trigger_merges(now)
        distinct = not merges or workflow.patched(patches.DISTINCT_TRIGGER_TIMES_PATCH)
        run = self._core.trigger(now, distinct=distinct)
        self._lifecycle.emit_recorded([run], now, queued=self._core.new_runs_wait())
        return run.scheduled_time

    def check_backfill(self, request: models.BackfillRequest) -> None:
        self._core.check_backfill(request.start_at, request.end_at)

    def apply_backfill(self, request: models.BackfillRequest) -> list[int]:
        now = now_ms()
        runs = self._core.backfill(request.start_at, request.end_at)
        self._lifecycle.emit_recorded(runs, now, queued=self._core.new_runs_wait())
        return [run.scheduled_time for run in runs]

    def check_redeliver(self, request: models.RedeliverRequest) -> None:
        self._core.redeliverable(request.idempotency_key)

    def apply_redeliver(self, request: models.RedeliverRequest) -> bool:
        self._redeliveries.start(self._core.begin_redelivery(request.idempotency_key))
        return True

    def apply_run_settled(self, signal: models.RunSettled) -> None:
        self._runs.finished(signal.scheduled_time, signal.outcome)

    def apply_run_acknowledged(self, signal: models.RunAcknowledged) -> None:
        self._runs.acknowledged(signal.scheduled_time, signal.outcome, signal.dead_letter_error)


def _in_update() -> bool:
    """Whether the running handler is an update's (not a signal's)."""
    return workflow.current_update_info() is not None
