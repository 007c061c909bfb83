"""Keep a workflow's commands independent of how the SDK groups an activation's jobs.

The hazard (temporalio/sdk-python#1591, temporalio/sdk-rust#1146): when a workflow task
applied a completion (a child's end, an activity's result, a timer) and sent **no command**,
and the next task carries an update, a worker without the workflow in its cache folds both
tasks into one activation and the Python SDK runs the update's handler *before* the
completion is applied; replay (and a warm worker) applies the completion first. Any decision
that the completion changes (a freed slot, a resolved dependency) is then taken on different
state by the two groupings: different commands, a failed workflow task, or silently swapped
results.

The rule both shells keep: **a workflow task that applies a completion which changes what the
workflow decides always sends a command.** Core folds two tasks only when the first one's
history has no command event, so the update then always gets an activation of its own, under
any worker. The command is a memo upsert (`WorkflowPropertiesModified`): no Temporal Cloud
action, one history event, and it carries a small status that the UI and `temporal workflow
describe` show. `docs/determinism.md` has the reasoning and its cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio import workflow

# The memo key under which each workflow publishes its status.
STATUS_MEMO_KEY = "durability_status"


def record_progress(status: Mapping[str, Any]) -> None:
    """Send the status memo as this workflow task's command (see the module docstring).

    Call it in the same activation as the completion it covers: right after the state change.
    """
    workflow.upsert_memo({STATUS_MEMO_KEY: dict(status)})
