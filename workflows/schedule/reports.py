"""The schedule's side of its runs: start each run's `ScheduledRun` child
(`workflows.schedule.run`), read its report, hand the runs still going over before
continue-as-new.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import (
    ChildWorkflowError,
    FailureError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from workflows.kernel import ShellKernel, now_ms
    from workflows.schedule.core import ScheduleCore
    from workflows.schedule.delivery import Deliveries, send_progress
    from workflows.schedule.models import (
        RUN_INTERRUPTED_ERROR,
        Outcome,
        Run,
        RunError,
        ScheduledRunInput,
        ScheduledRunObject,
        ScheduledRunResult,
        ScheduleInput,
        idempotency_key,
        run_workflow_id,
    )
    from workflows.schedule.outcome import errored
    from workflows.schedule.patches import RUN_PATHS_FROM_INPUT_PATCH, SCHEDULE_DELIVERS_PATCH
    from workflows.schedule.run import REPORT_BY_SIGNAL, ScheduledRunWorkflow
    from workflows.schedule.status import iso

# The kernel's task groups of child starts (`RunReports.start`) and of the watches on the
# started runs' completions, by scheduled_time.
STARTS = "run-start"
WATCHES = "run-watch"


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
    """The schedule's side of the protocol of `workflows.schedule.run`: it starts each run's
    child, reads the run's report from the child's completion (or, once handed over, from its
    signals) and applies it to the core; a run that finished with its outcome undelivered goes
    to `deliveries`."""

    def __init__(
        self,
        settings: ScheduleInput,
        core: ScheduleCore,
        kernel: ShellKernel,
        deliveries: Deliveries,
    ) -> None:
        self._settings = settings
        self._object_id = settings.object_id or ""
        self._core = core
        self._kernel = kernel
        self._deliveries = deliveries
        # Runs told to report by signal (`hand_over`): each is told once.
        self._handed_over: set[int] = set()

    def use_settings(self, settings: ScheduleInput) -> None:
        """Runs started from now on get `settings` in their input (`configure`); runs
        started before keep theirs."""
        self._settings = settings

    def start(self, run: Run, *, report_by_signal: bool) -> None:
        """Start the run's child (a task of the kernel's group `STARTS`); with
        `report_by_signal` (it takes the last free slot) it signals as soon as it finishes."""
        self._kernel.spawn(STARTS, self._start(run, report_by_signal, self._settings))

    async def _start(self, run: Run, report_by_signal: bool, settings: ScheduleInput) -> None:
        run_object = ScheduledRunObject.of(
            self._object_id, run.scheduled_time, run.due_at, run.params
        )
        deliver_by_schedule = workflow.patched(SCHEDULE_DELIVERS_PATCH)
        handle = await start_run(
            ScheduledRunInput(
                run=run_object,
                schedule_workflow_id=workflow.info().workflow_id,
                settings=settings,
                settle_by_signal=report_by_signal,
                deliver_by_schedule=deliver_by_schedule,
                run_paths=deliver_by_schedule and workflow.patched(RUN_PATHS_FROM_INPUT_PATCH),
            )
        )
        if handle is None:  # at most once (S6): this run already exists, and it reports
            self._core.forget(run.scheduled_time)
            self._kernel.wake()
            send_progress(self._kernel, self._core, refused=run.scheduled_time)
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
            # The run finished; the schedule delivers its outcome (that sends a command).
            self._deliveries.finished(run.scheduled_time, result.outcome)
            return
        self.acknowledged(
            run.scheduled_time,
            result.outcome,
            result.dead_letter_error,
            result.delivered is not False,
        )
        # A run's end frees a slot and forgets the run: decision state (the progress barrier).
        send_progress(self._kernel, self._core, acknowledged=run.scheduled_time)

    def finished(self, scheduled_time: int, outcome: Outcome) -> None:
        """The `run_settled` signal: the run finished; its slot is free."""
        if self._core.finished_by_signal(scheduled_time, outcome, now_ms()):
            self._kernel.wake()

    def acknowledged(
        self,
        scheduled_time: int,
        outcome: Outcome | None,
        dead_letter_error: RunError | None = None,
        delivered: bool = True,
    ) -> None:
        """The run finished and its outcome was delivered (or dead-lettered, or, not
        `delivered`, lost with its workflow): its completion, or `run_acknowledged`. The
        run is forgotten."""
        key = idempotency_key(self._object_id, scheduled_time)
        if self._core.acknowledged(
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
