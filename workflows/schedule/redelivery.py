"""Delivering a dead-lettered outcome again (the `redeliver` update).

A redelivery is the outcome activity once more, as it was, under the same retry policy. A
letter being redelivered is marked so; a redelivery still going when the schedule continues
as new is started again by the next run (at least once: the abandoned attempt may have
delivered too).
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.kernel import ShellKernel
    from workflows.schedule.core import DeadLetter, ScheduleCore
    from workflows.schedule.models import ScheduledRunObject, ScheduleInput
    from workflows.schedule.run import deliver_outcome

# Recorded when a run starts again the redeliveries its predecessor left going.
RESUME_REDELIVERIES_PATCH = "resume-carried-redeliveries"


class Redeliveries:
    """The redeliveries this run of the schedule has going: tasks of the kernel's group
    `TASKS`."""

    TASKS = "redelivery"

    def __init__(
        self,
        settings: ScheduleInput,
        core: ScheduleCore,
        kernel: ShellKernel,
        redelivered: Callable[[DeadLetter], None],
    ) -> None:
        self._settings = settings
        self._core = core
        self._kernel = kernel
        self._redelivered = redelivered

    def start(self, letter: DeadLetter) -> None:
        """Deliver again a letter the core marked as being redelivered."""
        self._spawn(letter)

    def resume_stranded(self) -> None:
        """Start again each redelivery the previous run had going when it continued as new:
        the letter came marked as being redelivered, and nothing else would ever clear it."""
        stranded = [letter for letter in self._core.state.dead_letters if letter.redelivering]
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
        self._redelivered(letter)
