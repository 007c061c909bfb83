"""Outcome deliveries made by the schedule itself: every run's outcome once its `ScheduledRun`
ended as the run finished (`Deliveries`), and a dead-lettered outcome again (the `redeliver`
update, `Redeliveries`).

A run's delivery is the outcome activity under `outcome_retries` (S11): its attempt is the
activity's own Temporal attempt. At most `MAX_DELIVERIES_IN_FLIGHT` go at once; more wait in
the carried state, oldest first. Before continue-as-new the schedule cancels the deliveries
still going (`Deliveries.stop`) and waits until each has really stopped: one that delivered
meanwhile is done, the others stay in the carried state with the attempts left (a lower
bound on those begun is subtracted: `core.attempts_begun`) and the next run starts them
again, as a new activity whose attempts count from 1. So no outcome is lost, none is
delivered by two activities at once, and a delivery crossing continue-as-new still ends.

A redelivery is the outcome activity once more, as it was, under the same retry policy. A
letter being redelivered is marked so; a redelivery still going when the schedule continues
as new is started again by the next run (at least once: the abandoned attempt may have
delivered too).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.kernel import ShellKernel, now_ms
    from workflows.schedule.core import ScheduleCore, attempts_begun
    from workflows.schedule.lifecycle import Lifecycle
    from workflows.schedule.models import (
        DeadLetter,
        Outcome,
        Run,
        ScheduledRunObject,
        ScheduleInput,
    )
    from workflows.schedule.outcome import Interrupted, deliver_outcome, deliver_until
    from workflows.schedule.patches import RESUME_REDELIVERIES_PATCH, SCHEDULE_DELIVERS_PATCH

# Outcome activities a schedule has going at once for its runs (Temporal allows 2,000 pending
# activities per workflow; lifecycle calls and redeliveries need room too).
MAX_DELIVERIES_IN_FLIGHT = 500


def send_progress(kernel: ShellKernel, core: ScheduleCore, **extra: int) -> None:
    """The progress barrier (`ShellKernel.progress`) with the schedule's status: call in the
    activation that applied a completion which changes a later decision."""
    kernel.progress({"running": core.running_count(), "queued": core.queued_count(), **extra})


class Deliveries:
    """The run outcomes this run of the schedule is delivering: tasks of the kernel's group
    `TASKS`, keyed by scheduled_time; a delivery's `dead_lettered` goes to `lifecycle`."""

    TASKS = "delivery"

    def __init__(
        self, settings: ScheduleInput, core: ScheduleCore, kernel: ShellKernel, lifecycle: Lifecycle
    ) -> None:
        self._settings = settings
        self._object_id = settings.object_id or ""
        self._core = core
        self._kernel = kernel
        self._lifecycle = lifecycle

    def use_settings(self, settings: ScheduleInput) -> None:
        """Deliveries started from now on use `settings` (`configure`); those going keep
        the settings they started with."""
        self._settings = settings

    def finished(self, scheduled_time: int, outcome: Outcome) -> None:
        """A run's child ended as its run finished: free its slot, deliver its outcome. The
        delivery's ScheduleActivityTask is this task's command; with none, the barrier."""
        if self._core.finished_to_deliver(scheduled_time, outcome, now_ms()):
            self._kernel.wake()  # a queued run can take the freed slot, or the run paused it
        # The delivery (or the barrier) is this task's command: an update in the next task
        # decides on what this completion changed (the freed slot, a pause on failure).
        if not self.pump():
            send_progress(self._kernel, self._core, stopped=scheduled_time)

    def resume(self) -> None:
        """First in a run of the schedule: deliver the outcomes the previous run carried."""
        if self._core.awaiting_delivery() and workflow.patched(SCHEDULE_DELIVERS_PATCH):
            self.pump()

    def pending(self) -> int:
        """Outcomes still to deliver (going or waiting for room)."""
        return len(self._core.awaiting_delivery())

    def going(self) -> int:
        """Deliveries going now."""
        return len(self._kernel.members(self.TASKS))

    async def stop(self) -> None:
        """Before continue-as-new: the core stops the deliveries (those going are cancelled,
        none starts); wait until each going has really stopped; the undelivered stay in the
        carried state for the next run. A cancellation meanwhile lifts the stop (the core
        decides: `ScheduleCore.deliveries_to_start`)."""
        self._core.begin_continue_as_new()
        await workflow.wait_condition(lambda: not self._kernel.busy(self.TASKS))

    def pump(self, ending: int | None = None) -> bool:
        """Start the deliveries the core says to start (`ScheduleCore.deliveries_to_start`,
        at most `MAX_DELIVERIES_IN_FLIGHT` going; the delivery `ending` no longer counts);
        returns whether one started."""
        going = {key for key in self._kernel.members(self.TASKS) if key != ending}
        started = self._core.deliveries_to_start(going, MAX_DELIVERIES_IN_FLIGHT)
        for run in started:
            self._kernel.spawn(self.TASKS, self._deliver(run), key=run.scheduled_time)
        return bool(started)

    async def _deliver(self, run: Run) -> None:
        scheduled_time = run.scheduled_time
        run_object = ScheduledRunObject.of(self._object_id, scheduled_time, run.due_at, run.params)
        settings = self._settings  # a `configure` meanwhile is for the deliveries after this
        retries = settings.outcome_retries
        left = run.delivery_attempts_left

        def emit(event_type: str, **fields: Any) -> None:
            self._lifecycle.emit_run(scheduled_time, event_type, now_ms(), **fields)

        result = await deliver_until(
            settings, run_object, run.outcome(), emit, self._core.deliveries_stopped, left
        )
        if isinstance(result, Interrupted):
            allowed = retries.max_attempts if left is None else left
            begun = (
                0
                if result.elapsed_ms is None
                else attempts_begun(
                    retries, settings.outcome_timeout_ms, result.elapsed_ms, allowed
                )
            )
            self._core.delivery_interrupted(scheduled_time, begun, retries.max_attempts)
            # Stopped for continue-as-new, the core starts nothing; a cancellation that came
            # since has it delivered again here, with the attempts left.
            self.pump(ending=scheduled_time)
            return
        self._core.delivered(scheduled_time, run_object.idempotency_key, result)
        # The run left `runs` (and maybe became a dead letter): decision state.
        if not self.pump(ending=scheduled_time):
            send_progress(self._kernel, self._core, delivered=scheduled_time)


class Redeliveries:
    """The redeliveries this run of the schedule has going: tasks of the kernel's group
    `TASKS`."""

    TASKS = "redelivery"

    def __init__(
        self,
        settings: ScheduleInput,
        core: ScheduleCore,
        kernel: ShellKernel,
    ) -> None:
        self._settings = settings
        self._core = core
        self._kernel = kernel

    def use_settings(self, settings: ScheduleInput) -> None:
        """Redeliveries started from now on use `settings` (`configure`)."""
        self._settings = settings

    def start(self, letter: DeadLetter) -> None:
        """Deliver again a letter the core marked as being redelivered."""
        self._spawn(letter)

    def resume_stranded(self) -> None:
        """Start again each redelivery the previous run had going when it continued as new:
        the letter came marked as being redelivered, and nothing else would ever clear it."""
        stranded = self._core.stranded_redeliveries()
        if stranded and workflow.patched(RESUME_REDELIVERIES_PATCH):
            for letter in stranded:
                self._spawn(letter)

    def _spawn(self, letter: DeadLetter) -> None:
        self._kernel.spawn(self.TASKS, self._redeliver(letter))

    async def _redeliver(self, letter: DeadLetter) -> None:
        run = ScheduledRunObject.of(
            self._settings.object_id or "", letter.scheduled_time, letter.due_at, letter.params
        )
        error = await deliver_outcome(self._settings, run, letter.outcome)
        self._core.redelivered(letter.idempotency_key, error)
        # The letter left the list (or may be redelivered again): a `redeliver` validator
        # decides on it, so this completion's task sends a command. See workflows.kernel.
        send_progress(self._kernel, self._core, redelivered=letter.scheduled_time)
