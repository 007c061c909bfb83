"""When a schedule continues as new: once its history is long, and after a drain.

Temporal refuses a continue-as-new that races a new event (a child's completion, a signal)
and fails that workflow task. So once the history is long the schedule starts no run and
waits until every run it started has ended. A run still going once the wait has added as
many events as the continue-as-new threshold (`kernel.drain_allowance`) is
handed over to signal reporting (`reports.hand_over`): a run that never ends must not grow the
history forever. Outcome deliveries do not hold the drain (one in its retry backoff adds no
events and could hold it for minutes): they are cancelled and carried when the run closes
(`delivery.Deliveries.stop`).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.kernel import drain_allowance, history_long
    from workflows.schedule.models import DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS


class Drain:
    """The drain before continue-as-new: not begun, going, or over."""

    def __init__(self, continue_as_new_after_events: int | None) -> None:
        self._threshold = continue_as_new_after_events or DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS
        # The history length at which to stop waiting, once draining.
        self._ends_at: int | None = None

    @property
    def going(self) -> bool:
        """Whether the drain has begun: no run may start."""
        return self._ends_at is not None

    def history_long(self) -> bool:
        """Whether it is time to continue as new."""
        return history_long(self._threshold)

    def begin_if_due(self) -> None:
        """Begin draining once the history is long."""
        if self._ends_at is None and self.history_long():
            length = workflow.info().get_current_history_length()
            self._ends_at = length + drain_allowance(self._threshold)

    def over(self, drained: bool) -> bool:
        """Whether to stop waiting: every run has `drained`, or the allowance is spent."""
        assert self._ends_at is not None
        return drained or workflow.info().get_current_history_length() >= self._ends_at
