"""Every workflow and built-in activity the worker serves, in one place."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def all_workflows() -> list[type]:
    """Workflow classes registered on every worker."""
    from workflows.ledger.workflow import FrozenRequestWorkflow, OperationLedgerWorkflow
    from workflows.schedule.workflow import DurabilityScheduleWorkflow, ScheduledRunWorkflow

    return [
        DurabilityScheduleWorkflow,
        ScheduledRunWorkflow,
        OperationLedgerWorkflow,
        FrozenRequestWorkflow,
    ]


def builtin_activities() -> Sequence[Callable[..., Any]]:
    """Built-in activities: logging defaults and HTTP webhooks for both capabilities."""
    from activities.ledger import ledger_activities
    from activities.schedule import schedule_activities

    return [*schedule_activities(), *ledger_activities()]
