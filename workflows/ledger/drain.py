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
# while the ledger drains it grants no other request its next attempt.
DRAIN_TIMEOUT = timedelta(seconds=60)


async def drain(quiet: Callable[[], bool], continue_as_new_after_events: int) -> None:
    """Wait until `quiet()`, within the drain's bounds (events and time)."""
    if quiet():
        return
    if not workflow.patched(DRAIN_PATCH):
        with suppress(TimeoutError):
            await workflow.wait_condition(quiet, timeout=QUIET_BEFORE_CONTINUE)
        return
    info = workflow.info()
    ends_at = info.get_current_history_length() + drain_allowance(continue_as_new_after_events)

    def over() -> bool:
        return quiet() or info.get_current_history_length() >= ends_at

    with suppress(TimeoutError):
        await workflow.wait_condition(
            over, timeout=DRAIN_TIMEOUT, timeout_summary="drain before continue-as-new"
        )
