"""Lifecycle events (S12) of a schedule's runs: an OpenTelemetry span each (never on replay),
and a best-effort call to the user's lifecycle activity when one is configured."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from temporalio.contrib.opentelemetry import TracingWorkflowInboundInterceptor
    from temporalio.contrib.opentelemetry.workflow import completed_span

    from workflows import metrics
    from workflows.schedule.core import Skipped
    from workflows.schedule.models import (
        Run,
        ScheduleInput,
        idempotency_key,
        lifecycle_event,
        lifecycle_span_attributes,
    )

LIFECYCLE_TIMEOUT = timedelta(seconds=10)
LIFECYCLE_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))


def _record_span(event: dict[str, Any]) -> None:
    if workflow.unsafe.is_replaying() or TracingWorkflowInboundInterceptor._from_context() is None:
        return
    attributes = lifecycle_span_attributes(event)
    completed_span(f"durability.scheduled_run.{event['type']}", attributes=attributes)


class Lifecycle:
    """Emits lifecycle events; `tasks` are the activity calls still in flight."""

    def __init__(self, settings: ScheduleInput) -> None:
        self._settings = settings
        self.tasks: set[asyncio.Task[None]] = set()

    def use_settings(self, settings: ScheduleInput) -> None:
        """Events emitted from now on go to `settings`' lifecycle activity (`configure`);
        calls already made keep theirs."""
        self._settings = settings

    def emit(self, event: dict[str, Any]) -> None:
        """Record `event` as a span and in the product metrics and, if configured, hand it to
        the lifecycle activity."""
        _record_span(event)
        metrics.record_lifecycle(event)
        workflow.logger.debug("lifecycle event %s", event)
        settings = self._settings
        if settings.lifecycle_activity is None:
            return
        task = asyncio.create_task(self._call(settings, settings.lifecycle_activity, event))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def emit_run(self, scheduled_time: int, event_type: str, now: int, **fields: Any) -> None:
        """`emit` the event `event_type` of the schedule's run at `scheduled_time`, at `now`."""
        key = idempotency_key(self._settings.object_id or "", scheduled_time)
        self.emit(lifecycle_event(event_type, key, scheduled_time, now, **fields))

    def emit_tick(
        self,
        due: Run | Skipped | None,
        caught_up: Skipped | None,
        now: int,
        *,
        queued: bool,
        depth: int,
    ) -> None:
        """A tick's events: `skipped` for each tick skipped (logged too), `due` for its run
        (`queued` when it waits for a slot; the queue's `depth` goes to the metrics)."""
        for skip in (s for s in (caught_up, due) if isinstance(s, Skipped)):
            workflow.logger.warning(
                "skipped the tick %s of %s: %s",
                skip.scheduled_time,
                self._settings.object_id,
                skip.reason,
            )
            self.emit_run(skip.scheduled_time, "skipped", now, reason=skip.reason)
        if due is not None and not isinstance(due, Skipped):
            self.emit_run(due.scheduled_time, "due", now, queued=queued)
            metrics.record(metrics.QUEUE_DEPTH, depth)

    def emit_recorded(self, runs: list[Run], now: int, *, queued: bool) -> None:
        """`due` for each run a `trigger` or `backfill` recorded."""
        for run in runs:
            self.emit_run(run.scheduled_time, "due", now, queued=queued)

    async def _call(
        self, settings: ScheduleInput, activity_name: str, event: dict[str, Any]
    ) -> None:
        try:
            await workflow.execute_activity(
                activity_name,
                event,
                task_queue=settings.activity_task_queue,
                start_to_close_timeout=LIFECYCLE_TIMEOUT,
                retry_policy=LIFECYCLE_RETRY,
                summary=f"lifecycle {event['type']}",
            )
        except ActivityError as error:
            workflow.logger.warning("lifecycle activity failed for %s: %s", event, error.cause)

    async def drain(self) -> None:
        """Wait until every lifecycle call has ended."""
        await workflow.wait_condition(lambda: not self.tasks)
