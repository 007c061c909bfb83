"""Handing a schedule's runs over to signal reporting before continue-as-new.

A run of the schedule workflow reads its children's ends from their completions, through
the handles it started them with. Continue-as-new loses those handles, so just before it
the parent tells every child still open to report by signal instead; the signal goes to
the parent's workflow ID, which reaches whichever run is current.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.exceptions import FailureError, is_cancelled_exception

# Internal signal, parent -> child (not part of the wire contract).
REPORT_BY_SIGNAL = "durability.report_by_signal"


async def hand_over(children: Sequence[tuple[str, asyncio.Task[Any] | None]]) -> set[str]:
    """Signal each child (workflow ID, the task awaiting its completion) to report by signal
    from now on, in the given order. A child that already closed cannot take the signal,
    but its completion is on its way to this run: wait for its task. Returns the workflow
    IDs that took the signal."""
    handed: set[str] = set()

    async def one(workflow_id: str, watch: asyncio.Task[Any] | None) -> None:
        try:
            await workflow.get_external_workflow_handle(workflow_id).signal(REPORT_BY_SIGNAL)
        except FailureError as error:
            if is_cancelled_exception(error):
                raise
            if watch is not None:
                await workflow.wait_condition(watch.done)
            return
        handed.add(workflow_id)

    await asyncio.gather(*(one(workflow_id, watch) for workflow_id, watch in children))
    return handed
