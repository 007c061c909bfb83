"""Continue as new only in a workflow task that delivered no update.

Temporal refuses a workflow task whose completion closes the run when a new event (a signal,
a child's end) arrived while the task ran: the task fails with `UnhandledCommand` and is
retried with the new event. Every update *delivered in that task* is then aborted with a
non-retryable error, "Unable to perform workflow execution update due to unexpected
workflow task failure" (`WorkflowNotReady`; temporalio/temporal#7296), although the
workflow did nothing wrong and the update never took effect. An update that arrives while
the closing task runs is safe: Temporal retries it on the next run.

So before it continues as new, a workflow asks `UpdateDeliveries.closing_must_wait()`: when
this task delivered an update, it sleeps for a new task (`next_task`) and asks again. Whether a task
delivered an update is read from the history length every update handler notes, which the
task's own updates share under any grouping of jobs (see `workflows.barrier`).

An update refused by its validator runs no handler and is not seen here: racing a close, it
can still get the error above instead of its refusal.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

# Recorded (as a patch marker) the first time a run waits: histories from 0.1.0 close at once.
CLOSE_WITHOUT_UPDATE_PATCH = "close-in-a-task-without-updates"
# The timer that asks Temporal for the next workflow task.
NEXT_TASK_DELAY = timedelta(milliseconds=1)
# Under a steady stream of updates every task may deliver one: a run closes anyway after
# this many waits.
MAX_WAITS = 20


class UpdateDeliveries:
    """Which workflow task last delivered an update to this run."""

    def __init__(self) -> None:
        self._last_task: int | None = None
        self._waits = 0

    def note(self) -> None:
        """Call first in every update handler."""
        self._last_task = workflow.info().get_current_history_length()

    def in_this_task(self) -> bool:
        """Whether the current workflow task delivered an update."""
        return self._last_task == workflow.info().get_current_history_length()

    def closing_must_wait(self) -> bool:
        """Whether to wait for another task before closing the run (see the module)."""
        if self._waits >= MAX_WAITS or not self.in_this_task():
            return False
        if not workflow.patched(CLOSE_WITHOUT_UPDATE_PATCH):
            return False
        self._waits += 1
        return True

    async def next_task(self) -> None:
        """Sleep for a new workflow task (one timer)."""
        await workflow.sleep(NEXT_TASK_DELAY, summary="close in a task without updates")
