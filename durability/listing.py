"""Schedules and ledgers found by visibility (`list_schedules`, `list_ledgers`)."""

from __future__ import annotations

from contextlib import suppress
from typing import TypedDict

from temporalio.client import Client, WorkflowExecution

from workflows import search_attributes
from workflows.schedule import SCHEDULE_WORKFLOW_TYPE


class Listed(TypedDict):
    """One schedule or ledger found by `list_schedules` / `list_ledgers` (visibility)."""

    id: str
    workflow_id: str
    status: str
    started_at: int
    version: int | None
    next_tick_at: int | None
    # A schedule's state (`never set`, `live`, `paused`, `cancelled`) from its state memo; None
    # for a ledger, and for a schedule that has not published one yet (a run older than 0.1.1).
    state: str | None
    # A ledger's operations per phase as of its last progress (its status memo); None for a
    # schedule, and for a ledger that has not published it yet.
    counts: dict[str, int] | None


async def list_workflows(
    temporal: Client, workflow_type: str, prefix: str, query: str | None, limit: int
) -> list[Listed]:
    """The workflows of `workflow_type` visibility finds: running ones, or those `query`
    matches, newest first, each by its business ID (its workflow ID without `prefix`)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    where = f"WorkflowType = '{workflow_type}' AND " + (
        f"({query})" if query else "ExecutionStatus = 'Running'"
    )
    found: list[Listed] = []
    async for execution in temporal.list_workflows(where, limit=limit):
        attributes = execution.typed_search_attributes
        next_tick = attributes.get(search_attributes.NEXT_TICK_AT)
        state, counts = await _memo_of(execution, workflow_type)
        found.append(
            Listed(
                id=execution.id.removeprefix(prefix),
                workflow_id=execution.id,
                status=execution.status.name if execution.status else "UNKNOWN",
                started_at=int(execution.start_time.timestamp() * 1000),
                version=attributes.get(search_attributes.SCHEDULE_VERSION),
                next_tick_at=None if next_tick is None else int(next_tick.timestamp() * 1000),
                state=state,
                counts=counts,
            )
        )
    return found


async def _memo_of(
    execution: WorkflowExecution, workflow_type: str
) -> tuple[str | None, dict[str, int] | None]:
    """A listed schedule's state, or a listed ledger's counts, from its memo (None when it
    holds none, or holds something this client does not read)."""
    with suppress(Exception):  # a memo that does not decode (e.g. another key ring)
        if workflow_type == SCHEDULE_WORKFLOW_TYPE:
            published = await execution.memo_value(search_attributes.SCHEDULE_STATE_MEMO_KEY, None)
            state = published.get("state") if isinstance(published, dict) else None
            return (state if isinstance(state, str) else None), None
        status = await execution.memo_value(search_attributes.STATUS_MEMO_KEY, None)
        if isinstance(status, dict):
            counts = {k: v for k, v in status.items() if isinstance(v, int)}
            return None, counts
    return None, None
