"""Every workflow and built-in activity the worker serves, in one place."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

if TYPE_CHECKING:
    from activities.schedule import WebhookAllowlist

# The product's own four workflows are defined with `sandboxed=False` (see
# `workflows/__init__.py`), so this runner serves users' workflows registered next to them.
# Our packages are deterministic at import time, so the sandbox passes them through instead
# of re-importing them for every run (that re-import cost ~40% of worker CPU with many short
# child workflows). The sandbox's runtime checks still apply to users' code.
PASSTHROUGH_PACKAGES = ("workflows", "activities", "durability", "pydantic", "croniter", "dateutil")


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandboxed runner every worker uses for workflows that do not opt out."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_PACKAGES)
    )


def all_workflows() -> list[type]:
    """Workflow classes registered on every worker."""
    from workflows.ledger.request import FrozenRequestWorkflow
    from workflows.ledger.workflow import OperationLedgerWorkflow
    from workflows.schedule.run import ScheduledRunWorkflow
    from workflows.schedule.workflow import DurabilityScheduleWorkflow

    return [
        DurabilityScheduleWorkflow,
        ScheduledRunWorkflow,
        OperationLedgerWorkflow,
        FrozenRequestWorkflow,
    ]


def builtin_activities(
    webhook_allowlist: WebhookAllowlist | None = None, ledger_url: str | None = None
) -> Sequence[Callable[..., Any]]:
    """Built-in activities: logging defaults and HTTP webhooks for both capabilities. The
    schedule's webhooks call only URLs in `webhook_allowlist` (default: the process's
    `DURABILITY_WEBHOOK_ALLOWED_URLS`; unset, they refuse every URL); the ledger's HTTP
    activities call `ledger_url` (default: the process's `DURABILITY_LEDGER_URL`)."""
    from activities.ledger import ledger_activities
    from activities.schedule import schedule_activities

    return [*schedule_activities(allowed_urls=webhook_allowlist), *ledger_activities(ledger_url)]
