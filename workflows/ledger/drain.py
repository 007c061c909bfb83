"""When a ledger continues as new: once its history is long, and after a drain.

Temporal refuses a continue-as-new that races a new event (a request's report signal, its
child's completion) and fails that workflow task. So once the history is long the ledger
launches and grants nothing, and waits until no request it launched is mid-attempt or about
to complete (its `quiet` rule). The wait is bounded by as many events as the continue-as-new
threshold (`kernel.drain_allowance`) and by `DRAIN_TIMEOUT`; a request still busy after that
reports to the next run (requests are ABANDON children and report by workflow ID).

A run recorded before `DRAIN_PATCH` waited at most `QUIET_BEFORE_CONTINUE`, which a loaded
worker that replays every task from the first event (a cold one) often outlived.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.kernel import drain_allowance

# Asked where a ledger first waits for its requests before continuing as new.
DRAIN_PATCH = "ledger-drain-before-close"
# The bound of the drain in a run recorded without `DRAIN_PATCH`.
QUIET_BEFORE_CONTINUE = timedelta(seconds=1)
# The drain's bound in time: an attempt whose activity no worker takes adds no events, and
# while the ledger drains it grants no other request its next attempt. Attempts report in
# well under a second; 10 s covers a loaded worker that replays every task.
DRAIN_TIMEOUT = timedelta(seconds=10)
DRAIN_SUMMARY = "drain before continue-as-new"


class Drain:
    """The ledger's drain before continue-as-new. Its bounds are set when it first waits and
    hold for the rest of the run: a close given up (an update arrived meanwhile) and tried
    again does not start them over."""

    def __init__(self) -> None:
        # The history length, and the workflow time in seconds, at which the drain is over.
        self._ends_at: int | None = None
        self._deadline = 0.0

    async def wait(self, quiet: Callable[[], bool], continue_as_new_after_events: int) -> None:
        """Wait until `quiet()`, within the drain's bounds (events and time)."""
        if quiet():
            return
        if not workflow.patched(DRAIN_PATCH):
            with suppress(TimeoutError):
                await workflow.wait_condition(quiet, timeout=QUIET_BEFORE_CONTINUE)
            return
        info = workflow.info()
        if self._ends_at is None:
            allowance = drain_allowance(continue_as_new_after_events)
            self._ends_at = info.get_current_history_length() + allowance
            self._deadline = workflow.time() + DRAIN_TIMEOUT.total_seconds()
        ends_at = self._ends_at

        def over() -> bool:
            return quiet() or info.get_current_history_length() >= ends_at

        left = self._deadline - workflow.time()
        if over() or left <= 0:
            return
        with suppress(TimeoutError):
            await workflow.wait_condition(
                over, timeout=timedelta(seconds=left), timeout_summary=DRAIN_SUMMARY
            )
